"""The local Kafka broker for tests, benchmarks, the demo and development (broker.py, pom.xml)."""
