# Two entry points for a fresh machine (Python 3.11+, Java 17+, Maven on PATH):
#   make demo   - local Kafka broker + Spark + Airflow, end to end
#   make test   - the whole test suite (unit + integration against a real broker)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
KAFKA_DIR ?= .local/kafka
SPARK_DIR ?= .local/spark

.PHONY: demo test chromium lint unit-test bench bench-vs-kafka-streams broker-start broker-stop spark-cluster-start spark-cluster-stop jars \
        clean

# setup.py and the C sources: the editable install builds the C loops in place
$(STAMP): pyproject.toml setup.py airflow_stateful_provider/streams/kafka/_native_batch_decoding.c \
          airflow_stateful_provider/streams/state/keyvalue/_native_changelog_batch.c
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: Python >= 3.11 is required, found " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	@# The editable install's metadata build leaves an egg-info here. A process with the
	@# repository on sys.path (pytest, the DAG tests' Airflow) would see the distribution twice,
	@# and Airflow's task runner stops loading plugins at the first duplicate name: the
	@# OpenLineage listener after ours would be lost. The installed dist-info is enough.
	rm -rf airflow_stateful_provider.egg-info
	touch $(STAMP)

# The Kafka jars, and the class archives the brokers' and Spark's JVMs start on (tools/class_archive.py;
# made once for this JVM and these jars: about 50 s).
jars: $(STAMP)
	$(BIN)/python -m tools.kafka.broker resolve
	$(BIN)/python -m tools.spark_class_archive

# Four pytest workers, each with its own broker and Airflow home; a test module stays on one
# worker, so its module fixtures (Airflow's services, a running cluster) start once.
TEST_WORKERS ?= 4

# chromium first: the Stateful streams page's test needs it, and a missing one stops here at
# once (or is installed with apt-get when that needs no password), not after the suite.
test: chromium lint $(STAMP) jars
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

chromium:
	@tools/ensure_chromium.sh

# ruff and mypy (configured in pyproject.toml; docs/architecture.md, "Lint and types").
lint: $(STAMP)
	@$(BIN)/ruff check . || { echo "error: ruff found the problems above (fix them; 'ruff check --fix' does the mechanical ones)" >&2; exit 1; }
	@$(BIN)/mypy || { echo "error: mypy found the type errors above (docs/architecture.md, 'Lint and types')" >&2; exit 1; }

unit-test: $(STAMP)
	$(BIN)/python -m pytest tests/unit

demo: $(STAMP) jars
	$(BIN)/python -m tools.demo

# Every benchmark script (a file with a __main__ block; bench/topologies.py is a module they load),
# run as a module of the repository: python -m bench.<name>. bench/vs_kafka_streams.py runs
# Kafka Streams' default settings at both guarantees (at-least-once, exactly_once_v2 at 100 ms).
bench: $(STAMP) jars
	@for script in $$(grep -l '^if __name__ == "__main__":' bench/*.py); do echo "== $$script"; $(BIN)/python -m bench.$$(basename $$script .py) || exit 1; done

# Only the comparison with Kafka Streams at both guarantees (about 6 minutes).
bench-vs-kafka-streams: $(STAMP) jars
	$(BIN)/python -m bench.vs_kafka_streams

# A broker for interactive development; it keeps running until `make broker-stop`.
broker-start: $(STAMP) jars
	$(BIN)/python -m tools.kafka.broker start --dir $(KAFKA_DIR)

broker-stop:
	@test -x $(BIN)/python && $(BIN)/python -m tools.kafka.broker stop --dir $(KAFKA_DIR) || true

# A Spark standalone cluster on loopback (a Master and two Workers of 2 task slots each);
# it prints the master URL (spark://127.0.0.1:<port>) and keeps running until `make spark-cluster-stop`.
spark-cluster-start: $(STAMP)
	$(BIN)/python -m tools.spark_cluster start --dir $(SPARK_DIR)

spark-cluster-stop:
	@test -x $(BIN)/python && $(BIN)/python -m tools.spark_cluster stop --dir $(SPARK_DIR) || true

clean: broker-stop spark-cluster-stop
	rm -rf $(VENV) tools/kafka/lib .local
