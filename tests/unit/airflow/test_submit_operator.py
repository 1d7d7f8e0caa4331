"""SubmitTopologyOperator without Spark or a broker: what it submits (arguments, secrets kept
off the command line), how it waits for the instances, and how it stops the application."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from unittest import mock

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.operators.submit import SubmitTopologyOperator
from airflow_stateful_provider.spark.app import PASSWORD_ENV
from airflow_stateful_provider.streams.errors import UnknownApplicationError
from tests.unit.streams.status.status_documents import NOW_MS, document, snapshot

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"


@pytest.fixture
def sasl_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", json.dumps({
        "conn_type": "stateful_streams", "host": "b1:9092,b2:9092", "login": "streams", "password": "s3cret",
        "extra": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}}))


def operator(**kwargs) -> SubmitTopologyOperator:
    return SubmitTopologyOperator(task_id="submit", topology=TOPOLOGY,
                                  **{"streams_config": {"application_id": "clicks"}, "instances": 2, **kwargs})


def test_arguments_carry_the_connection_but_never_the_password(sasl_connection):
    op = operator(streams_config={"application_id": "clicks", "num_standby_replicas": 1,
                                  "client_configs": {"request_timeout_ms": 5000}})
    values = op._prepare(StatefulStreamsHook())
    args = op.application_args
    assert args[:2] == ["--topology", TOPOLOGY] and args[args.index("--instances") + 1] == "2"
    sent = json.loads(args[args.index("--config-json") + 1])
    assert sent == values
    assert sent["bootstrap_servers"] == ["b1:9092", "b2:9092"]
    assert sent["client_configs"] == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                      "sasl_plain_username": "streams", "request_timeout_ms": 5000}
    assert "s3cret" not in " ".join(args)
    assert op.env_vars == {PASSWORD_ENV: "s3cret"}


@pytest.mark.parametrize("oauth", ["fixed token", "provider path"])
def test_mutual_tls_and_oauthbearer_secrets_reach_the_driver_only_through_its_environment(monkeypatch, oauth):
    from airflow_stateful_provider.spark.app import OAUTH_TOKEN_ENV, SSL_PASSWORD_ENV, parse_config_values

    provider = "tests.unit.airflow.test_submit_operator:token_for_tests"
    monkeypatch.setenv("AIRFLOW_CONN_STATEFUL_STREAMS_DEFAULT", json.dumps({
        "conn_type": "stateful_streams", "host": "b1:9093",
        **({"password": "the-t0ken"} if oauth == "fixed token" else {}),
        "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "ssl_cafile": "/etc/ca.pem",
                  "ssl_certfile": "/etc/client.pem", "ssl_keyfile": "/etc/client-key.pem",
                  "ssl_password": "key-pa55", **({"sasl_oauth_token_provider": provider}
                                                 if oauth == "provider path" else {})}}))
    op = operator()
    op._prepare(StatefulStreamsHook())
    arguments = " ".join(op.application_args)
    assert "key-pa55" not in arguments and "the-t0ken" not in arguments
    sent = json.loads(op.application_args[op.application_args.index("--config-json") + 1])
    assert sent["client_configs"] == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "ssl_cafile": "/etc/ca.pem",
        "ssl_certfile": "/etc/client.pem", "ssl_keyfile": "/etc/client-key.pem",
        **({"sasl_oauth_token_provider": provider} if oauth == "provider path" else {})}
    expected_env = {SSL_PASSWORD_ENV: "key-pa55", **({OAUTH_TOKEN_ENV: "the-t0ken"} if oauth == "fixed token" else {})}
    assert op.env_vars == expected_env

    # the driver: the environment's secrets join the config the instance jobs carry to the executors
    for name, value in op.env_vars.items():
        monkeypatch.setenv(name, value)
    driver = parse_config_values(None, op.application_args[op.application_args.index("--config-json") + 1], [])
    assert driver["client_configs"]["ssl_password"] == "key-pa55"
    token = driver["client_configs"]["sasl_oauth_token_provider"]
    assert (token.token() if oauth == "fixed token" else token) == (
        "the-t0ken" if oauth == "fixed token" else provider)


def token_for_tests() -> str:
    return "token-from-a-function"


def test_the_streams_config_may_name_its_own_brokers(sasl_connection):
    op = operator(streams_config='{"application_id": "clicks", "bootstrap_servers": "other:9092"}')
    assert op._prepare(StatefulStreamsHook())["bootstrap_servers"] == "other:9092"


@pytest.mark.parametrize("config, instances, message", [
    ({"num_standby_replicas": 1}, 1, "streams_config needs an 'application_id'"),
    ("{not json", 1, "streams_config is not valid JSON"),
    ({"application_id": "a"}, "two", "instances must be an integer >= 1, got 'two'"),
    ({"application_id": "a"}, 0, "instances must be an integer >= 1, got 0"),
    # the streams config is checked before spark-submit runs (in cluster mode only the driver's log would say why)
    ({"application_id": ".."}, 1, "streams_config: application_id must be a non-empty string"),
    ({"application_id": "a", "consumer_configs": {"session_timeout_ms": "abc"}}, 1,
     "streams_config: consumer_configs: session_timeout_ms must be an int >= 0, got str 'abc'"),
    ({"application_id": "a", "snapshot_url": "foo://x"}, 1, "streams_config: snapshot_url 'foo://x'"),
    ({"application_id": "a", "comit_interval_ms": 5}, 1, "did you mean 'commit_interval_ms'"),
])
def test_bad_arguments_are_named(sasl_connection, config, instances, message):
    with pytest.raises(AirflowException, match=message):
        operator(streams_config=config, instances=instances)._prepare(StatefulStreamsHook())


def test_templated_fields_include_the_topology_config_and_instances():
    assert {"topology", "streams_config", "instances", "processing_guarantee", "application_args", "conf"} <= set(
        SubmitTopologyOperator.template_fields)


def test_processing_guarantee_overrides_the_config_and_is_checked(sasl_connection):
    op = operator(streams_config={"application_id": "clicks", "processing_guarantee": "at_least_once"},
                  processing_guarantee="exactly_once_v2")
    assert op._prepare(StatefulStreamsHook())["processing_guarantee"] == "exactly_once_v2"
    assert "processing_guarantee" not in operator()._prepare(StatefulStreamsHook())
    with pytest.raises(AirflowException, match=r"processing_guarantee must be one of .*got 'exactly_once'"):
        operator(processing_guarantee="exactly_once")._prepare(StatefulStreamsHook())


class FakeStatusHook:
    def __init__(self, *answers) -> None:
        self.answers = list(answers)

    def get_status(self, application_id, **kwargs):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def fresh(*ids: str, published_at: int = NOW_MS - 1_000):
    return snapshot(*(document(i, published_at=published_at) for i in ids))


def test_waits_until_every_instance_published_since_the_submission(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    op = operator(submit_timeout=60)
    hook = FakeStatusHook(UnknownApplicationError("no status topic"), fresh("clicks-0"),
                          fresh("clicks-0", "clicks-1", published_at=NOW_MS - 100_000),  # an older run's documents
                          fresh("clicks-0", "clicks-1"))
    status = op._wait_for_instances(hook, "clicks", NOW_MS - 5_000, None, None)
    assert {i.instance_id for i in status.instances} == {"clicks-0", "clicks-1"}
    assert hook.answers == [fresh("clicks-0", "clicks-1")]


def test_a_driver_that_exits_fails_the_task_with_its_log_tail(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text("line 1\nerror: master 'local[1]' offers 1 task slot(s) but --instances is 2\n")
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    process.wait()
    with pytest.raises(AirflowException, match=r"(?s)exited with 2 before all instances reported in.*offers 1 task"):
        operator()._wait_for_instances(FakeStatusHook(fresh("clicks-0")), "clicks", NOW_MS - 5_000, process, log)


def test_instances_that_never_report_time_out_with_what_was_seen(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    op = operator(submit_timeout=timedelta(seconds=0))
    log = tmp_path / "driver.log"
    log.write_text("still starting\n")
    with pytest.raises(AirflowException, match=r"(?s)reported so far: \['clicks-0'\] of \['clicks-0', 'clicks-1'\].*"
                                               r"still starting"):
        op._wait_for_instances(FakeStatusHook(fresh("clicks-0")), "clicks", NOW_MS - 5_000, None, log)


def test_an_int_submit_timeout_is_seconds_and_waited(tmp_path, monkeypatch):
    """submit_timeout=3 waits 3 s (it used to be 3 ms); sleeps are recorded, not slept."""
    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    monkeypatch.setattr("time.sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    op = operator(submit_timeout=3)
    with pytest.raises(AirflowException, match=r"did not all report in within 0:00:03"):
        op._wait_for_instances(FakeStatusHook(fresh("clicks-0")), "clicks", NOW_MS - 5_000, None, tmp_path / "log")
    assert clock[0] == 4.0  # polls every 2 s: at 0, 2 and 4 (past the 3 s deadline)


def test_on_kill_sends_a_stop_command_not_a_kill(sasl_connection):
    op = operator()
    with mock.patch.object(StatefulStreamsHook, "send_command") as send:
        op.on_kill()
    send.assert_called_once_with("clicks", "stop")


def test_durations_are_seconds_or_timedeltas_and_application_args_are_refused():
    op = operator(submit_timeout=90, initial_backoff=0.5, failure_window=600, max_backoff=30,
                  stop_timeout=timedelta(seconds=30))
    assert op.submit_timeout == timedelta(seconds=90)
    assert op.restart_args[op.restart_args.index("--initial-backoff") + 1] == "0.5"
    assert op.restart_args[op.restart_args.index("--failure-window") + 1] == "600.0"
    assert op.restart_args[op.restart_args.index("--max-backoff") + 1] == "30.0"
    assert op.restart_args[op.restart_args.index("--stop-timeout") + 1] == "30.0"
    with pytest.raises(ValueError, match="max_backoff must be a number of seconds or a timedelta, got str '1.5'"):
        operator(max_backoff="1.5")
    with pytest.raises(ValueError, match="builds the application arguments itself"):
        operator(application_args=["--instances", "3"])


def test_an_application_still_reporting_in_is_not_submitted_twice(sasl_connection):
    op = operator()
    with mock.patch.object(StatefulStreamsHook, "get_status", return_value=fresh("clicks-0")):
        with pytest.raises(AirflowException, match=r"'clicks' is already running \(instances \['clicks-0'\]"):
            op._refuse_if_running(StatefulStreamsHook(), "clicks")
    with mock.patch.object(StatefulStreamsHook, "get_status", side_effect=UnknownApplicationError("none")):
        op._refuse_if_running(StatefulStreamsHook(), "clicks")


def test_snapshot_url_and_connection_reach_the_driver_outside_the_arguments(sasl_connection, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SNAPSHOTS", json.dumps({
        "conn_type": "aws", "login": "AKIAEXAMPLE", "password": "aws-s3cret",
        "extra": {"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"}}))
    op = operator(snapshot_url="s3://bucket/snapshots", snapshot_conn_id="snapshots")
    values = op._prepare(StatefulStreamsHook())
    assert values["snapshot_url"] == "s3://bucket/snapshots" and "snapshot_storage_options" not in values
    assert "aws-s3cret" not in " ".join(op.application_args)
    from airflow_stateful_provider.streams.snapshots.catalog import SNAPSHOT_STORAGE_OPTIONS_ENV

    assert json.loads(op.env_vars[SNAPSHOT_STORAGE_OPTIONS_ENV]) == {
        "key": "AKIAEXAMPLE", "secret": "aws-s3cret",
        "client_kwargs": {"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"}}

    # the driver side: the environment becomes the config's storage options
    from airflow_stateful_provider.spark.app import parse_config_values

    monkeypatch.setenv(SNAPSHOT_STORAGE_OPTIONS_ENV, op.env_vars[SNAPSHOT_STORAGE_OPTIONS_ENV])
    driver = parse_config_values(None, op.application_args[op.application_args.index("--config-json") + 1], [])
    assert driver["snapshot_storage_options"]["secret"] == "aws-s3cret"


def test_a_snapshot_connection_needs_a_url_and_usable_options(sasl_connection, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GCS", json.dumps({"conn_type": "google_cloud_platform", "extra": {}}))
    with pytest.raises(AirflowException, match="needs a snapshot_url"):
        operator(snapshot_conn_id="gcs")._prepare(StatefulStreamsHook())
    with pytest.raises(AirflowException, match=r"connection 'gcs' of type 'google_cloud_platform': put the fsspec "
                                               r"storage options in its extra"):
        operator(snapshot_url="gs://b/p", snapshot_conn_id="gcs")._prepare(StatefulStreamsHook())
    monkeypatch.setenv("AIRFLOW_CONN_GCS", json.dumps({"conn_type": "google_cloud_platform",
                                                        "extra": {"storage_options": {"token": "cloud"}}}))
    op = operator(snapshot_url="gs://b/p", snapshot_conn_id="gcs")
    op._prepare(StatefulStreamsHook())
    from airflow_stateful_provider.streams.snapshots.catalog import SNAPSHOT_STORAGE_OPTIONS_ENV

    assert json.loads(op.env_vars[SNAPSHOT_STORAGE_OPTIONS_ENV]) == {"token": "cloud"}


def test_standalone_cluster_mode_is_refused_before_anything_runs(monkeypatch, sasl_connection):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({
        "conn_type": "spark", "host": "spark://master.example", "port": 7077, "extra": {"deploy-mode": "cluster"}}))
    op = operator()
    with mock.patch.object(SubmitTopologyOperator, "_refuse_if_running"), \
            mock.patch("subprocess.Popen") as popen, pytest.raises(AirflowException) as info:
        op.execute({})
    assert "cluster deploy mode on the standalone master spark://master.example:7077" in str(info.value)
    assert "set its deploy mode to 'client'" in str(info.value)
    popen.assert_not_called()


def test_on_incompatible_is_fail_or_reset():
    assert operator().on_incompatible == "fail"
    assert operator(on_incompatible="reset").on_incompatible == "reset"
    with pytest.raises(ValueError, match=r"on_incompatible must be one of \['fail', 'reset'\], got 'drop'"):
        operator(on_incompatible="drop")
    templated = operator(on_incompatible="{{ params.on_incompatible }}")
    assert "on_incompatible" in SubmitTopologyOperator.template_fields
    templated.on_incompatible = "wipe"  # as rendered
    with pytest.raises(AirflowException, match=r"on_incompatible must be one of \['fail', 'reset'\], got 'wipe'"):
        templated._plan(StatefulStreamsHook(), {}, {})
