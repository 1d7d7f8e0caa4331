"""Kafka for tests, benchmarks, the demo and development: the local broker (broker.py,
pom.xml) and what is done with its topics (topics.py)."""
