"""Developer tooling shared by the tests, the benchmarks and the demo: the local Kafka broker
(``tools.kafka``), streams instances as processes and the waits on them, a Spark standalone
cluster, Airflow services. Not part of the provider package; imported from the repository
root (pytest's ``pythonpath``, or ``python -m tools.<module>``)."""
