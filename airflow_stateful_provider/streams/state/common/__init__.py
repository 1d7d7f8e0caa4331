"""What every store kind shares: the RocksDB and in-memory bases, the transaction buffer,
time segments, store metadata, changelog records, maintenance results, and the task
directory's files (``.checkpoint``, ``task-identity.json``)."""
