"""``SubmitTopologyOperator``: start a streams application on Spark and return once its
instances report in.

A streams application runs until it is stopped, so the Airflow task must not wait for the
Spark application to finish (as ``SparkSubmitOperator`` does):

- cluster deploy mode (YARN, Kubernetes): spark-submit returns after the submission
  (``waitAppCompletion=false``); Spark standalone masters (``spark://``) run Python drivers
  in client mode only, so cluster mode there is refused before anything is launched;
- local and client mode: spark-submit is launched detached (its own session, output to
  ``log_path``), so it outlives the Airflow task.

Either way the operator then waits, up to ``submit_timeout``, until every instance
``<application_id>-<i>`` has published a status document since the submission; if the
driver exits first or the time runs out it fails with the driver's log tail. XCom gets the
application id, the Spark application id and web UI address (``spark_ui_url``, from the
instances' status documents) and the submission details; the task instance links to the
"Stateful streams" page of the application and to the Spark UI (links/stateful_streams.py).
``on_kill`` asks the application to stop gracefully through the control topic (never by
killing spark-submit).

Kafka settings come from the ``stateful_streams`` connection unless the streams config sets
them. Its secrets (the SASL password, a client key's password, a fixed OAUTHBEARER token)
are kept out of the application arguments: they travel in the driver's environment
(``STATEFUL_STREAMS_KAFKA_PASSWORD``, ``..._SSL_PASSWORD``, ``..._OAUTH_TOKEN``, see
spark/app.py) and reach the executors inside the instance jobs. In local and client mode
that is the spark-submit process environment; on YARN and Kubernetes the Spark provider
turns ``env_vars`` into ``--conf spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*``
(masked in the task log, redacted in Spark's UI); Spark standalone cluster mode cannot pass
them at all. A token provider named by import path travels in the config, as its path.

Snapshots (docs/snapshots.md): ``snapshot_url`` sets the config's ``snapshot_url``, and the
storage options of ``snapshot_conn_id`` (credentials) travel the same way as the password,
in ``STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS`` (JSON) of the driver's environment.

Submitting an application whose instances still report in (a live, non-stale status
document) is refused: two Spark applications would run the same instance ids.

Before submitting, the topology is compared with the one the application last started with
(operators/redeploy.py, docs/redeploying.md): an incompatible change fails the task unless
``on_incompatible="reset"``; the plan goes to the task log and XCom (``topology_plan``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import conf
from airflow.sdk.exceptions import AirflowException

import airflow_stateful_provider.spark.app as spark_app
from airflow_stateful_provider.hooks.snapshot_storage import get_snapshot_storage_options
from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.links.stateful_streams import (
    APPLICATION_ID_XCOM,
    SPARK_UI_XCOM,
    SparkUILink,
    StatefulStreamsPageLink,
)
from airflow_stateful_provider.operators.maintenance_arguments import is_template
from airflow_stateful_provider.operators.redeploy import (
    TOPOLOGY_PLAN_XCOM,
    act_on_plan,
    check_on_incompatible,
    make_plan,
)
from airflow_stateful_provider.spark.app import OAUTH_TOKEN_ENV, PASSWORD_ENV, SSL_PASSWORD_ENV
from airflow_stateful_provider.streams.durations import seconds_arg_ms
from airflow_stateful_provider.streams.kafka.oauth_tokens import StaticTokenProvider, TokenProviderReference
from airflow_stateful_provider.streams.snapshots.catalog import SNAPSHOT_STORAGE_OPTIONS_ENV

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["SubmitTopologyOperator"]

_YARN_WAIT = "spark.yarn.submit.waitAppCompletion"
_FINAL_STATES = ("NOT_RUNNING", "ERROR")
_K8S_WAIT = "spark.kubernetes.submission.waitAppCompletion"
_GUARANTEES = ("at_least_once", "exactly_once_v2")


class SubmitTopologyOperator(SparkSubmitOperator):
    """Submit ``topology`` (``package.module:function``) as ``instances`` supervised streams
    instances; see the module docstring and docs/airflow-reference.md.

    :param topology: ``package.module:function`` returning a Topology (importable on the
        driver and the executors).
    :param streams_config: StreamsConfig values (templated; a dict or a JSON string);
        ``application_id`` is required.
    :param instances: streams instances, one Spark task slot each.
    :param processing_guarantee: "at_least_once" or "exactly_once_v2" (templated); when
        given it overrides ``streams_config``'s value (docs/exactly-once.md).
    :param stateful_streams_conn_id: Kafka connection (brokers, security) and status reads.
    :param snapshot_url: where store snapshots go (templated; overrides ``streams_config``'s
        ``snapshot_url``), e.g. ``file:///mnt/shared/snapshots`` or ``s3://bucket/prefix``.
    :param snapshot_conn_id: Airflow connection of the snapshot location (``aws``, or any type
        whose extra holds ``storage_options``); its options reach the driver through the
        environment, never the command line.
    :param on_incompatible: what to do when the topology changes a store in a way its data
        cannot follow (the plan, docs/redeploying.md): "fail" (the default; nothing is
        submitted) or "reset" (reset the application, as ResetApplicationOperator does, then
        submit); templated.
    :param submit_timeout: how long to wait for every instance's first status document
        (seconds or a timedelta, as every duration here).
    :param log_path: where a detached spark-submit writes its output (local/client mode).
    :param max_failures, failure_window, initial_backoff, max_backoff, stop_timeout: the
        supervisor's restart policy and stop bound (spark/app.py); durations in seconds or a
        timedelta.

    Other keyword arguments are SparkSubmitOperator's (``conn_id`` of the Spark connection,
    ``conf``, ``executor_memory``, ``num_executors``, ``deploy_mode`` ...).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "topology", "streams_config",
                                      "instances", "processing_guarantee", "log_path",
                                      "stateful_streams_conn_id", "snapshot_url", "snapshot_conn_id", "on_incompatible")
    template_fields_renderers = {"streams_config": "json"}
    ui_color = "#cfe8ff"
    operator_extra_links = (StatefulStreamsPageLink(), SparkUILink())

    def __init__(
        self,
        *,
        topology: str,
        streams_config: Mapping[str, Any] | str,
        instances: int | str = 1,
        processing_guarantee: str | None = None,
        stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
        snapshot_url: str | None = None,
        snapshot_conn_id: str | None = None,
        on_incompatible: str = "fail",
        submit_timeout: timedelta | float = timedelta(minutes=5),
        log_path: str | None = None,
        max_failures: int = 5,
        failure_window: timedelta | float = timedelta(minutes=10),
        initial_backoff: timedelta | float = timedelta(seconds=1),
        max_backoff: timedelta | float = timedelta(seconds=30),
        stop_timeout: timedelta | float = timedelta(minutes=2),
        application: str = "",
        name: str | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("application_args"):
            raise ValueError(f"SubmitTopologyOperator builds the application arguments itself; got application_args="
                             f"{kwargs['application_args']!r} (use topology, streams_config and instances)")
        submit_timeout, failure_window, initial_backoff, max_backoff, stop_timeout = (
            timedelta(milliseconds=seconds_arg_ms(value, name)) for value, name in (
                (submit_timeout, "submit_timeout"), (failure_window, "failure_window"),
                (initial_backoff, "initial_backoff"), (max_backoff, "max_backoff"), (stop_timeout, "stop_timeout")))
        # SparkSubmitOperator's defaults: the [openlineage] spark_inject_* options.
        if openlineage_inject_parent_job_info is None:
            openlineage_inject_parent_job_info = conf.getboolean("openlineage", "spark_inject_parent_job_info",
                                                                 fallback=False)
        if openlineage_inject_transport_info is None:
            openlineage_inject_transport_info = conf.getboolean("openlineage", "spark_inject_transport_info",
                                                                fallback=False)
        super().__init__(application=application or spark_app.__file__, name=name or "stateful-streams",
                         openlineage_inject_parent_job_info=openlineage_inject_parent_job_info,
                         openlineage_inject_transport_info=openlineage_inject_transport_info, **kwargs)
        self.inject_openlineage_parent_job_info = bool(openlineage_inject_parent_job_info)
        self.inject_openlineage_transport_info = bool(openlineage_inject_transport_info)
        self.topology = topology
        self.streams_config = streams_config
        self.instances = instances
        self.processing_guarantee = processing_guarantee
        self.stateful_streams_conn_id = stateful_streams_conn_id
        self.snapshot_url = snapshot_url
        self.snapshot_conn_id = snapshot_conn_id
        self.on_incompatible = on_incompatible
        if not is_template(on_incompatible):
            check_on_incompatible(on_incompatible, self.task_id)
        self.submit_timeout = submit_timeout
        self.log_path = log_path
        self.restart_args = ["--max-failures", str(max_failures),
                             "--failure-window", str(failure_window.total_seconds()),
                             "--initial-backoff", str(initial_backoff.total_seconds()),
                             "--max-backoff", str(max_backoff.total_seconds()),
                             "--stop-timeout", str(stop_timeout.total_seconds())]
        self._application_id: str | None = None

    # ------------------------------------------------------------------ building the submission

    def _config_values(self, hook: StatefulStreamsHook) -> dict[str, Any]:
        """The streams config with the connection's brokers and security settings filled in
        (its secrets left out: they go through the environment, :meth:`_secrets`)."""
        config = self.streams_config
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except json.JSONDecodeError as exc:
                raise AirflowException(f"streams_config is not valid JSON: {exc}") from exc
        if not isinstance(config, Mapping):
            raise AirflowException(f"streams_config must be a mapping or a JSON object, got {type(config).__name__}")
        values = dict(config)
        if not values.get("application_id"):
            raise AirflowException(f"streams_config needs an 'application_id', got keys {sorted(values)}")
        if self.processing_guarantee:
            if self.processing_guarantee not in _GUARANTEES:
                raise AirflowException(f"processing_guarantee must be one of {list(_GUARANTEES)}, "
                                       f"got {self.processing_guarantee!r}")
            values["processing_guarantee"] = self.processing_guarantee
        if self.snapshot_url:
            values["snapshot_url"] = self.snapshot_url
        connection = hook.get_client_configs()
        values.setdefault("bootstrap_servers", connection.pop("bootstrap_servers"))
        for secret in ("bootstrap_servers", "sasl_plain_password", "ssl_password"):
            connection.pop(secret, None)
        provider = connection.pop("sasl_oauth_token_provider", None)
        if isinstance(provider, TokenProviderReference):
            connection["sasl_oauth_token_provider"] = provider.path  # JSON; each process imports it
        if connection:
            values["client_configs"] = {**connection, **dict(values.get("client_configs") or {})}
        return values

    @staticmethod
    def _secrets(hook: StatefulStreamsHook) -> dict[str, str]:
        """The connection's secrets as the driver's environment variables (spark/app.py)."""
        connection = hook.get_client_configs()
        provider = connection.get("sasl_oauth_token_provider")
        secrets = {PASSWORD_ENV: connection.get("sasl_plain_password"),
                   SSL_PASSWORD_ENV: connection.get("ssl_password"),
                   OAUTH_TOKEN_ENV: provider.token() if isinstance(provider, StaticTokenProvider) else None}
        return {name: str(value) for name, value in secrets.items() if value}

    def _instance_count(self) -> int:
        """``instances`` after templating (a rendered template may be a string)."""
        try:
            count = int(self.instances)
        except (TypeError, ValueError):
            count = 0
        if isinstance(self.instances, bool) or count < 1 or str(count) != str(self.instances).strip():
            raise AirflowException(f"instances must be an integer >= 1, got {self.instances!r}")
        return count

    def _prepare(self, hook: StatefulStreamsHook) -> dict[str, Any]:
        self.instances = self._instance_count()
        values = self._config_values(hook)
        _check_config(values)
        self._application_id = values["application_id"]
        self.application_args = ["--topology", self.topology, "--config-json", json.dumps(values, sort_keys=True),
                                 "--instances", str(self.instances), *self.restart_args]
        secrets = self._secrets(hook)
        if secrets:
            self.env_vars = {**(self.env_vars or {}), **secrets}
        if self.snapshot_conn_id:
            if not values.get("snapshot_url"):
                raise AirflowException(f"snapshot_conn_id={self.snapshot_conn_id!r} needs a snapshot_url (the "
                                       f"operator's or the streams_config's)")
            try:
                options = get_snapshot_storage_options(self.snapshot_conn_id)
            except ValueError as exc:
                raise AirflowException(str(exc)) from None
            self.env_vars = {**(self.env_vars or {}), SNAPSHOT_STORAGE_OPTIONS_ENV: json.dumps(options)}
        return values

    # ------------------------------------------------------------------ execute

    def _refuse_if_running(self, hook: StatefulStreamsHook, application_id: str) -> None:
        from airflow_stateful_provider.streams.errors import UnknownApplicationError

        try:
            status = hook.get_status(application_id)
        except UnknownApplicationError:
            return
        live = sorted(i.instance_id for i in status.instances if not i.stale and i.state not in _FINAL_STATES)
        if live:
            raise AirflowException(f"application {application_id!r} is already running (instances {live} report in); "
                                   f"stop it first: stateful-streams stop {application_id}")

    # The Spark provider declares execute() -> None; this one returns its XCom value, as BaseOperator allows.
    def execute(self, context: Context) -> dict[str, Any]:  # type: ignore[override]
        streams_hook = StatefulStreamsHook(self.stateful_streams_conn_id)
        values = self._prepare(streams_hook)
        application_id = values["application_id"]
        self._refuse_if_running(streams_hook, application_id)
        # Cluster deploy mode must not wait for the application to end (it never does); the
        # two settings are ignored by Spark in client and local mode.
        self.conf = {"spark.speculation": "false", _YARN_WAIT: "false", _K8S_WAIT: "false", **(self.conf or {})}
        self.conf = self._with_openlineage_properties(self.conf, context)
        spark_hook = self._get_hook()
        self._hook = spark_hook
        master, deploy_mode = _master_and_deploy_mode(spark_hook)
        cluster = deploy_mode == "cluster"
        self._refuse_standalone_cluster_mode(master, cluster)
        self._plan(streams_hook, values, context)
        submitted_at_ms = time.time_ns() // 1_000_000
        process: subprocess.Popen | None = None
        log_path: Path | None = None
        if cluster:
            self.log.info("submitting %s in cluster mode (spark-submit returns after the submission)", application_id)
            spark_hook.submit(self.application)
        else:
            log_path = Path(self.log_path or Path(tempfile.gettempdir()) / "stateful-streams" /
                            f"{application_id}-{submitted_at_ms}.log")
            process = self._launch_detached(spark_hook, log_path)
        try:
            status = self._wait_for_instances(streams_hook, application_id, submitted_at_ms, process, log_path)
        except Exception:
            if process is not None and process.poll() is None:
                self.log.warning("stopping %s: its instances did not all report in", application_id)
                self._request_stop(streams_hook, application_id)
            raise
        details = {
            "application_id": application_id,
            "instances": [f"{application_id}-{i}" for i in range(self._instance_count())],
            "topology": self.topology,
            "master": master,
            "deploy_mode": deploy_mode or "client",
            "spark_submit_pid": process.pid if process is not None else None,
            "log_path": str(log_path) if log_path else None,
            "submitted_at_ms": submitted_at_ms,
            "instance_hosts": {i.instance_id: i.host for i in status.instances},
            **_spark_application(status),
        }
        context["ti"].xcom_push(key=APPLICATION_ID_XCOM, value=application_id)
        context["ti"].xcom_push(key=SPARK_UI_XCOM, value=details["spark_ui_url"])
        return details

    def _plan(self, hook: StatefulStreamsHook, values: Mapping[str, Any], context: Context) -> None:
        """The topology plan (operators/redeploy.py): to the log and XCom; fails or resets on an
        incompatible change, as ``on_incompatible`` says."""
        try:
            on_incompatible = check_on_incompatible(self.on_incompatible, self.task_id)
        except ValueError as exc:
            raise AirflowException(str(exc)) from None
        plan = make_plan(self.log, hook, self.topology, values)
        context["ti"].xcom_push(key=TOPOLOGY_PLAN_XCOM, value=None if plan is None else plan.to_json_dict())
        if plan is not None:
            act_on_plan(self.log, hook, plan, self.topology, values, on_incompatible)

    def _with_openlineage_properties(self, spark_conf: dict[str, Any], context: Context) -> dict[str, Any]:
        """What SparkSubmitOperator.execute (overridden here) does with the two flags: the
        OpenLineage parent job and transport go into the Spark properties, for the
        OpenLineage Spark integration when the application's Spark installs it."""
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
            inject_transport_information_into_spark_properties,
        )

        if self.inject_openlineage_parent_job_info:
            spark_conf = inject_parent_job_information_into_spark_properties(spark_conf, context)
        if self.inject_openlineage_transport_info:
            spark_conf = inject_transport_information_into_spark_properties(spark_conf, context)
        return spark_conf

    # ------------------------------------------------------------------ lineage

    def get_openlineage_facets_on_start(self) -> Any:
        """Inputs: the topology's source topics; outputs: its sink topics (not the topics a
        sink picks per record, nor repartition and changelog topics, which are internal)."""
        from airflow_stateful_provider.operators.lineage import operator_lineage, topic_datasets

        try:
            values = self._config_values(StatefulStreamsHook(self.stateful_streams_conn_id))
            sources, sinks = _external_topics(self.topology, values)
        except Exception as exc:  # noqa: BLE001 - lineage must never fail the task
            self.log.warning("no lineage for %s: %s", self.topology, exc)
            return operator_lineage()
        servers = values["bootstrap_servers"]
        return operator_lineage(inputs=topic_datasets(servers, sources), outputs=topic_datasets(servers, sinks))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_start()

    def _refuse_standalone_cluster_mode(self, master: str, cluster: bool) -> None:
        """Spark standalone runs Python drivers in client mode only (spark-submit refuses the
        rest only after starting a JVM); say so before, with what to change."""
        if cluster and master.startswith("spark://"):
            raise AirflowException(
                f"the Spark connection {self._conn_id!r} asks for cluster deploy mode on the standalone master "
                f"{master}, which does not run Python applications in cluster mode: set its deploy mode to "
                f"'client' (the driver then runs detached on this Airflow worker's host; see docs/spark.md)")

    def _launch_detached(self, spark_hook: Any, log_path: Path) -> subprocess.Popen:
        # The Spark hook only runs spark-submit to its end; its command builder is the one
        # private member this needs (tests/unit/airflow/test_spark_provider_contract.py).
        command = spark_hook._build_spark_submit_command(self.application)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **{k: str(v) for k, v in (self.env_vars or {}).items()}}
        self.log.info("launching spark-submit detached; driver output in %s", log_path)
        with open(log_path, "ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)

    def _wait_for_instances(self, hook: StatefulStreamsHook, application_id: str, submitted_at_ms: int,
                            process: subprocess.Popen | None, log_path: Path | None) -> Any:
        """Poll the status topic until every instance published a document after the
        submission; fail early if the driver exits."""
        from airflow_stateful_provider.streams.errors import StreamsError

        expected = {f"{application_id}-{i}" for i in range(self._instance_count())}
        deadline = time.monotonic() + self.submit_timeout.total_seconds()
        last_problem = "no status read yet"
        while True:
            if process is not None and process.poll() is not None:
                raise AirflowException(f"the Spark driver of {application_id!r} exited with {process.returncode} "
                                       f"before all instances reported in.\n{self._log_tail(log_path)}")
            try:
                status = hook.get_status(application_id, timeout=timedelta(seconds=10))
                fresh = {i.instance_id for i in status.instances if i.published_at >= submitted_at_ms and not i.stale}
                if expected <= fresh:
                    self.log.info("all %d instance(s) of %s reported in", len(expected), application_id)
                    return status
                last_problem = f"reported so far: {sorted(fresh & expected) or 'none'} of {sorted(expected)}"
            except StreamsError as exc:
                last_problem = str(exc)
            if time.monotonic() >= deadline:
                raise AirflowException(f"instances of {application_id!r} did not all report in within "
                                       f"{self.submit_timeout} ({last_problem}).\n{self._log_tail(log_path)}")
            self.log.info("waiting for the instances of %s: %s", application_id, last_problem)
            time.sleep(2)

    @staticmethod
    def _log_tail(log_path: Path | None, lines: int = 40) -> str:
        if log_path is None:
            return ("(cluster deploy mode: the spark-submit output is above in this task's log, "
                    "the driver's in the cluster)")
        try:
            text = log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(driver log {log_path} unreadable: {exc})"
        return f"Last {min(lines, len(text))} lines of the driver log {log_path}:\n" + "\n".join(text[-lines:])

    # ------------------------------------------------------------------ stop

    def _request_stop(self, hook: StatefulStreamsHook, application_id: str) -> None:
        try:
            command = hook.send_command(application_id, "stop")
            self.log.info("sent stop command %s to %s", command.command_id, application_id)
        except Exception:  # on_kill and clean-up paths must not raise
            self.log.exception("could not send a stop command to %s", application_id)

    def on_kill(self) -> None:
        """Graceful stop through the control topic: instances leave the group and
        checkpoint; killing spark-submit would kill Python workers without cleanup."""
        application_id = self._application_id
        if application_id is None:
            try:
                application_id = self._config_values(StatefulStreamsHook(self.stateful_streams_conn_id)).get(
                    "application_id")
            except Exception:  # noqa: BLE001
                application_id = None
        if application_id:
            self._request_stop(StatefulStreamsHook(self.stateful_streams_conn_id), application_id)


def _spark_application(status: Any) -> dict[str, Any]:
    """The Spark application id and web UI address the instances report (None when they do
    not: the Spark UI is off, or an earlier build)."""
    hosts = [i.host_application for i in status.instances if i.host_application is not None]
    return {"spark_application_id": hosts[0].application_id if hosts else None,
            "spark_ui_url": next((h.ui_url for h in hosts if h.ui_url), None)}


def _external_topics(topology: str, values: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(source topics, sink topics) of the topology, internal topics left out."""
    from airflow_stateful_provider.streams import StreamsConfig
    from airflow_stateful_provider.streams.runner import load_topology

    built = load_topology(topology, StreamsConfig.from_mapping(values))
    sources = [topic for topic in built.source_topics() if not built.is_internal_topic(topic)]
    return sources, built.sink_topics()


def _master_and_deploy_mode(spark_hook: Any) -> tuple[str, str | None]:
    """The master and deploy mode the Spark hook resolved from its connection and the
    operator's arguments (a private member: tests/unit/airflow/test_spark_provider_contract.py)."""
    connection = spark_hook._connection
    return connection["master"], connection["deploy_mode"]


def _check_config(values: Mapping[str, Any]) -> None:
    """Refuse a bad streams config here, naming the setting, before spark-submit runs: the
    driver would refuse it too, but in cluster deploy mode only its log would say why."""
    from airflow_stateful_provider.streams.config import StreamsConfig
    from airflow_stateful_provider.streams.errors import ConfigError

    try:
        StreamsConfig.from_mapping(values)
    except ConfigError as exc:
        raise AirflowException(f"streams_config: {exc}") from None
