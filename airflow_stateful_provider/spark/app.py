"""spark-submit application: run a streams topology as N supervised instances on Spark.

    spark-submit --master 'local[3,2]' airflow_stateful_provider/spark/app.py \
        --topology airflow_stateful_provider.examples.clicks_and_payments:build_topology \
        --config streams.json [--config-json '{...}'] [--set key=value ...] --instances 2

The driver validates the config and the topology (exit 2 with the offending value), makes
sure the status and control topics exist, and runs the :class:`.supervisor.Supervisor`:
one single-task Spark job per instance (spark/instance_job.py), restarted with backoff and
a higher epoch when it fails. ``spark.speculation`` is forced off: a speculative copy of an
instance task would be a second instance with the same id and state directory.

Stop: ``stateful-streams stop <application_id>`` (a stop command on the control topic) or
SIGTERM/SIGINT to this driver process. Every instance leaves the group, checkpoints and
returns; the driver then exits 0. It exits 1 after a crash loop (the last error is in the
final event) or when instances had to be cancelled at the stop timeout.

Progress goes to stdout as one JSON event per line, prefixed ``STATEFUL-STREAMS ``
(instance_started / instance_failed / instance_restarting / instance_stopped /
stop_requested / supervisor_finished ...), for operators of the job and the tests (docs/spark.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_stateful_provider.spark.instance_job import InstanceSpec, run_instance
from airflow_stateful_provider.spark.restart_policy import RestartPolicy
from airflow_stateful_provider.spark.supervisor import Supervisor
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import ConfigError, SnapshotError, StreamsError, TopologyError
from airflow_stateful_provider.streams.kafka.client_settings import ADMIN, CONSUMER, settings_for
from airflow_stateful_provider.streams.process_logging import configure_process_logging
from airflow_stateful_provider.streams.snapshots.catalog import storage_options_from_env

if TYPE_CHECKING:
    from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["EVENT_PREFIX", "OAUTH_TOKEN_ENV", "PASSWORD_ENV", "SSL_PASSWORD_ENV", "main", "parse_config_values",
           "spark_application", "task_attempts"]

log = logging.getLogger("airflow_stateful_provider.spark.app")

EVENT_PREFIX = "STATEFUL-STREAMS "
#: The Kafka connection's secrets, read from the driver's environment so they never appear on
#: a command line; the instance jobs carry them to the executors. The SASL password,
PASSWORD_ENV = "STATEFUL_STREAMS_KAFKA_PASSWORD"
#: the password of the client certificate's key (mutual TLS),
SSL_PASSWORD_ENV = "STATEFUL_STREAMS_KAFKA_SSL_PASSWORD"
#: and a fixed OAUTHBEARER token.
OAUTH_TOKEN_ENV = "STATEFUL_STREAMS_KAFKA_OAUTH_TOKEN"
_LOCAL_MASTER = re.compile(r"^local(?:\[(?P<threads>[^,\]]+)(?:,(?P<failures>\d+))?\])?$")


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stateful-streams-spark-app", description=__doc__.splitlines()[0])
    parser.add_argument("--topology", required=True, help="package.module:function returning a Topology")
    parser.add_argument("--config", help="JSON file of StreamsConfig values (readable by the driver)")
    parser.add_argument("--config-json", help="StreamsConfig values as a JSON object (cluster deploy mode)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config value")
    parser.add_argument("--instances", type=int, default=1, help="streams instances (one Spark task slot each)")
    parser.add_argument("--max-failures", type=int, default=5, help="failures of one instance within "
                        "--failure-window that end the application (crash loop)")
    parser.add_argument("--failure-window", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--initial-backoff", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--max-backoff", type=float, default=30.0, metavar="SECONDS")
    parser.add_argument("--stop-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long a stop may take before remaining instance jobs are cancelled")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.instances < 1:
        parser.error(f"--instances must be >= 1, got {args.instances}")
    return args


def parse_config_values(path: str | None, inline: str | None, overrides: list[str]) -> dict[str, Any]:
    """StreamsConfig values from a file, an inline JSON object and ``key=value`` overrides
    (later wins), plus the Kafka secrets of the environment (a value in the config wins);
    validated by building a StreamsConfig."""
    from airflow_stateful_provider.streams.kafka.oauth_tokens import StaticTokenProvider
    from airflow_stateful_provider.streams.runner import config_values

    values = config_values(path, overrides, inline)
    secrets = {setting: make(os.environ[name]) for name, setting, make in (
        (PASSWORD_ENV, "sasl_plain_password", str), (SSL_PASSWORD_ENV, "ssl_password", str),
        (OAUTH_TOKEN_ENV, "sasl_oauth_token_provider", StaticTokenProvider)) if os.environ.get(name)}
    if secrets:
        values["client_configs"] = {**secrets, **dict(values.get("client_configs") or {})}
    storage_options = storage_options_from_env()  # snapshot credentials, off the command line too
    if storage_options:
        values["snapshot_storage_options"] = {**storage_options, **dict(values.get("snapshot_storage_options") or {})}
    for managed in ("instance_id", "instance_epoch", "host_application"):
        if managed in values:
            raise ConfigError(f"{managed!r} is set by the supervisor for each instance; remove it from the config "
                              f"(got {values[managed]!r})")
    StreamsConfig.from_mapping(values)
    return values


def spark_application(sc: Any) -> dict[str, Any]:
    """StreamsConfig.host_application of the instances: this Spark application's id and its
    driver's web UI (None when ``spark.ui.enabled`` is false)."""
    return {"kind": "spark", "application_id": sc.applicationId, "ui_url": sc.uiWebUrl}


def task_attempts(master: str, conf: Mapping[str, str]) -> int:
    """How many times Spark runs a task before failing its job: F of ``local[N,F]`` (1 for
    plain ``local[N]``), else ``spark.task.maxFailures`` (Spark's default 4)."""
    match = _LOCAL_MASTER.match(master)
    if match:
        return int(match.group("failures") or 1)
    return int(conf.get("spark.task.maxFailures", "4"))


def _local_task_slots(master: str) -> int | None:
    match = _LOCAL_MASTER.match(master)
    if not match:
        return None
    threads = match.group("threads")
    if threads in (None, ""):
        return 1
    return os.cpu_count() or 1 if threads == "*" else int(threads)


class SparkJobRunner:
    """Runs each instance as a one-task job under its own job group."""

    def __init__(self, spark_context: Any) -> None:
        self.sc = spark_context

    def run(self, spec: InstanceSpec, group: str, description: str) -> Mapping[str, Any]:
        self.sc.setJobGroup(group, description, interruptOnCancel=False)
        return self.sc.parallelize([spec], 1).map(run_instance).collect()[0]

    def cancel(self, group: str) -> None:
        self.sc.cancelJobGroup(group)


class ControlWatcher(threading.Thread):
    """Follows the control topic from its current end: a stop for every instance stops the
    supervisor (the instances have read it themselves); a stop for some retires them."""

    def __init__(self, config: StreamsConfig, supervisor: Supervisor) -> None:
        super().__init__(name="control-watcher", daemon=True)
        self.config = config
        self.supervisor = supervisor
        self._closed = threading.Event()
        self._consumer = _new_consumer(config, client_id=f"{config.application_id}-supervisor-control")
        from kafka import TopicPartition

        from airflow_stateful_provider.streams.status.document import control_topic_name

        self._partition = TopicPartition(control_topic_name(config.application_id), 0)
        self._consumer.assign([self._partition])
        self._consumer.seek_to_end(self._partition)
        self._consumer.position(self._partition)

    def run(self) -> None:
        from airflow_stateful_provider.streams.control.commands import ControlCommand

        while not self._closed.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=500)
            except Exception:  # keep watching; the driver's SIGTERM path still works
                log.exception("reading the control topic failed")
                self._closed.wait(2)
                continue
            for records in batches.values():
                for record in records:
                    try:
                        command = ControlCommand.from_json_bytes(record.value)
                    except Exception as exc:  # noqa: BLE001 - the instances report bad commands too
                        log.warning("control topic offset %d: ignored (%s)", record.offset, exc)
                        continue
                    if command.application_id != self.config.application_id or command.command_type != "stop":
                        continue
                    if command.instances is None:
                        self.supervisor.request_stop(f"stop command {command.command_id}", send=False)
                    else:
                        for instance_id in command.instances:
                            self.supervisor.retire(instance_id)

    def close(self) -> None:
        self._closed.set()
        self.join(timeout=5)
        self._consumer.close()


def _client_configs(config: StreamsConfig, kind: str) -> dict[str, Any]:
    """The bootstrap servers and the ``client_configs`` a client of ``kind`` knows."""
    return {"bootstrap_servers": list(config.bootstrap_servers), **settings_for(kind, config.client_configs)}


def _new_consumer(config: StreamsConfig, client_id: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(**{**_client_configs(config, CONSUMER), "client_id": client_id, "group_id": None,
                            "enable_auto_commit": False, "allow_auto_create_topics": False,
                            **config.consumer_configs})


def _prepare_topics(config: StreamsConfig, topology: Topology | None = None) -> None:
    """The status and control topics exist before any instance or watcher needs them; the
    brokers are reached, replication_factor checked and pre-created changelogs checked
    (they must be able to hold their stores' data) first (instance/preflight.py)."""
    from kafka import KafkaAdminClient

    from airflow_stateful_provider.streams.instance.preflight import (
        check_existing_changelogs,
        check_replication_factor,
        open_admin,
    )
    from airflow_stateful_provider.streams.status.publisher import ensure_control_topic, ensure_status_topic
    from airflow_stateful_provider.streams.topics.internal_topics import internal_topics

    admin = open_admin(config, lambda: KafkaAdminClient(**{
        **_client_configs(config, ADMIN), "client_id": f"{config.application_id}-supervisor", **config.admin_configs}))
    try:
        check_replication_factor(admin, config)
        if topology is not None:
            check_existing_changelogs(admin, internal_topics(topology, config.application_id), config)
        ensure_status_topic(admin, config.application_id)
        ensure_control_topic(admin, config.application_id)
    finally:
        admin.close()


def _latest_epochs(config: StreamsConfig) -> dict[str, int]:
    """Epoch per instance id in the status topic (ids whose last document remains)."""
    from airflow_stateful_provider.streams.status.reader import read_status_documents

    documents = read_status_documents(list(config.bootstrap_servers), config.application_id,
                                      client_configs=config.client_configs, allow_empty=True)
    return {instance_id: doc.epoch for instance_id, doc in documents.items()}


def _send_stop(config: StreamsConfig, instances: tuple[str, ...] | None) -> None:
    from airflow_stateful_provider.streams.control.channel import send_command
    from airflow_stateful_provider.streams.control.commands import new_command

    send_command(list(config.bootstrap_servers),
                 new_command(config.application_id, "stop", instances=instances),
                 client_configs=config.client_configs)


#: Supervisor threads emit events concurrently; print() writes the text and the newline
#: separately, so unguarded lines could interleave ("PREFIX {a}PREFIX {b}\n\n").
_EMIT_LOCK = threading.Lock()


def _emit(event: dict) -> None:
    line = EVENT_PREFIX + json.dumps(event, sort_keys=True, default=str) + "\n"
    with _EMIT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    configure_process_logging(args.log_level)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from airflow_stateful_provider.streams.instance.preflight import check_snapshot_storage, check_topic_names
    from airflow_stateful_provider.streams.runner import load_topology

    try:
        values = parse_config_values(args.config, args.config_json, args.set)
        config = StreamsConfig.from_mapping(values)
        topology = load_topology(args.topology, config)
        topology.validate()
        check_topic_names(topology, config)
        check_snapshot_storage(config)
        policy = RestartPolicy(initial_backoff_s=args.initial_backoff, max_backoff_s=args.max_backoff,
                               max_failures=args.max_failures, failure_window_s=args.failure_window)
    except (ConfigError, TopologyError, SnapshotError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from pyspark import InheritableThread
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(f"stateful-streams-{config.application_id}")
             .config("spark.speculation", "false").getOrCreate())
    try:
        sc = spark.sparkContext
        conf = dict(sc.getConf().getAll())
        if conf.get("spark.speculation", "false").lower() != "false":
            print("error: spark.speculation must be false: a speculative copy of an instance task would run the "
                  "same instance twice", file=sys.stderr)
            return 2
        master = sc.master or ""  # a running SparkContext always has its master
        slots = _local_task_slots(master)
        if slots is not None and slots < args.instances:
            print(f"error: master {sc.master!r} offers {slots} task slot(s) but --instances is {args.instances}; "
                  f"each instance holds one slot while it runs (use local[{args.instances + 1},2])", file=sys.stderr)
            return 2
        from kafka.errors import KafkaError

        try:
            _prepare_topics(config, topology)
            initial = {instance_id: epoch + 1 for instance_id, epoch in _latest_epochs(config).items()}
        except StreamsError as exc:  # unreachable brokers, too few brokers for replication_factor, ...
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KafkaError as exc:
            print(f"error: preparing the status and control topics on {','.join(config.bootstrap_servers)} failed: "
                  f"{exc!r}", file=sys.stderr)
            return 2
        # every instance's status document names this Spark application and its web UI
        values = {**values, "host_application": spark_application(sc)}
        supervisor = Supervisor(
            application_id=config.application_id, topology=args.topology, config_values=values,
            instances=args.instances, runner=SparkJobRunner(sc), send_stop=lambda ids: _send_stop(config, ids),
            policy=policy, initial_epochs=initial, latest_epochs=lambda: _latest_epochs(config),
            epoch_stride=task_attempts(master, conf), spark_local_dir=conf.get("spark.local.dir"),
            log_level=args.log_level,
            stop_timeout_s=args.stop_timeout, emit=_emit, thread_factory=InheritableThread)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda num, _frame: supervisor.stop_on_signal(signal.Signals(num).name))
        watcher = ControlWatcher(config, supervisor)
        watcher.start()
        _emit({"event": "driver_started", "application_id": config.application_id, "pid": os.getpid(),
               "master": sc.master, "spark_application_id": sc.applicationId, "spark_ui_url": sc.uiWebUrl})
        try:
            return supervisor.run()
        finally:
            watcher.close()
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
