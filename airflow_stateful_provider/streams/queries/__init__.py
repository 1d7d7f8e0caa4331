"""Interactive queries: read live store state by key, range, session and as-of time, in the
instance (``KafkaStreams.query``) and from outside it over the query topics
(docs/interactive-queries.md)."""
