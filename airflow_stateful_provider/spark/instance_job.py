"""The body of one instance job: runs a KafkaStreams instance inside a Spark task.

The supervisor (spark/supervisor.py) submits, per instance, a job of a single task whose
function is :func:`run_instance`. The task builds the topology, starts the instance with
its stable ``instance_id`` and the epoch it was given, and blocks until the instance ends:

- a stop command on the control topic closes it cleanly (commit, checkpoint, leave the
  group, tombstone its status document); the task then returns a summary;
- a restart command on the control topic closes it the same way and starts its next
  incarnation, epoch + 1, in the same task on the same state directory (streams/instance/host.py);
- an instance that ends in ERROR (or fails to start) raises, so the task fails and the
  supervisor restarts the instance with a higher epoch.

Spark itself may retry a failed task (``local[N,F]``, ``spark.task.maxFailures``); each
attempt runs with ``epoch + attempt number``, and the supervisor spaces the epochs of its
resubmissions by the number of attempts Spark may make, so every run of an instance id has
a distinct, increasing epoch and an older run is fenced off by a newer one.

State lives under the executor's local directories (``SPARK_LOCAL_DIRS`` / YARN's
``LOCAL_DIRS``, else ``spark.local.dir`` as the driver saw it), in
``<local dir>/stateful-streams/<instance_id>/``, so a restart on the same executor host
finds its stores and checkpoints and restores only the remainder. An explicit
``state_dir`` in the streams config is used instead, as ``<state_dir>/<instance_id>``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams.process_logging import LOG_FORMAT, quiet_kafka_client

__all__ = ["InstanceSpec", "instance_state_dir", "run_instance"]

log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class InstanceSpec:
    """What one instance job needs; pickled by Spark into the task."""

    topology: str
    #: StreamsConfig values as given by the user (JSON-compatible).
    config_values: Mapping[str, Any]
    instance_id: str
    #: Epoch of the first attempt of this job; attempt n runs with ``epoch + n``.
    epoch: int
    #: ``spark.local.dir`` as seen by the driver: the fallback when executors do not say.
    spark_local_dir: str | None = None
    log_level: str = "INFO"


def instance_state_dir(spec: InstanceSpec, environ: Mapping[str, str] = os.environ) -> str:
    """Where this instance keeps its task directories (see module docstring)."""
    explicit = spec.config_values.get("state_dir")
    if explicit:
        return os.path.join(str(explicit), spec.instance_id)
    dirs = environ.get("SPARK_LOCAL_DIRS") or environ.get("LOCAL_DIRS") or spec.spark_local_dir \
        or tempfile.gettempdir()
    first = dirs.split(",")[0].strip()
    return os.path.join(first, "stateful-streams", spec.instance_id)


def _attempt_number() -> int:
    try:
        from pyspark import TaskContext
    except ImportError:  # running outside Spark (unit tests)
        return 0
    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def run_instance(spec: InstanceSpec) -> dict[str, Any]:
    """Run the instance until it is stopped; returns its summary. Raises when the instance
    cannot start or ends in ERROR (the job then fails and the supervisor restarts it)."""
    from airflow_stateful_provider.streams.config import StreamsConfig
    from airflow_stateful_provider.streams.instance.host import InstanceHost
    from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState
    from airflow_stateful_provider.streams.runner import load_topology

    _configure_logging(spec.log_level)
    epoch = spec.epoch + _attempt_number()
    state_dir = instance_state_dir(spec)
    config = StreamsConfig.from_mapping({**spec.config_values, "instance_id": spec.instance_id,
                                         "instance_epoch": epoch, "state_dir": state_dir})
    host = InstanceHost(lambda incarnation: KafkaStreams(load_topology(spec.topology, incarnation), incarnation),
                        config)
    started = time.monotonic()
    log.info("instance %s epoch %d starting (state dir %s, pid %d)", spec.instance_id, epoch, state_dir, os.getpid())
    host.start()
    # a stop command ends it; a restart command starts its next incarnation in this task (instance/host.py)
    streams = host.run()
    if streams.state is KafkaStreamsState.ERROR:
        error = next((t.error for t in streams.threads if t.error is not None), None)
        raise RuntimeError(f"instance {spec.instance_id} epoch {streams.config.instance_epoch} ended in ERROR: "
                           f"{error!r}")
    return {"instance_id": spec.instance_id, "epoch": streams.config.instance_epoch, "state": streams.state.value,
            "host": socket.gethostname(), "pid": os.getpid(), "state_dir": state_dir,
            "seconds": round(time.monotonic() - started, 3)}


def _configure_logging(level: str) -> None:
    """Executor logs: the instance's own lines on stderr, Kafka's client chatter at WARNING."""
    root = logging.getLogger()
    if not any(getattr(h, "_stateful_streams", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler._stateful_streams = True  # type: ignore[attr-defined]  # marks the handler as ours
        quiet_kafka_client(handler)
        root.addHandler(handler)
    root.setLevel(level)
