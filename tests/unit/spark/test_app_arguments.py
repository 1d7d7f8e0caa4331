"""The spark-submit application's argument handling (no Spark started)."""

from __future__ import annotations

import json

import pytest

from airflow_stateful_provider.spark.app import main, parse_config_values, task_attempts
from airflow_stateful_provider.streams.errors import ConfigError

BASE = {"application_id": "clicks", "bootstrap_servers": "127.0.0.1:9092"}


def test_config_values_merge_file_inline_json_and_overrides(tmp_path):
    path = tmp_path / "streams.json"
    path.write_text(json.dumps({**BASE, "num_standby_replicas": 0}))
    values = parse_config_values(str(path), '{"num_standby_replicas": 1, "commit_interval_ms": 500}',
                                 ["commit_interval_ms=200", "application_id=clicks-2"])
    assert values == {**BASE, "application_id": "clicks-2", "num_standby_replicas": 1, "commit_interval_ms": 200}


@pytest.mark.parametrize("inline, sets, message", [
    ("[1]", [], "--config-json must hold a JSON object, got list"),
    ("{bad", [], "--config-json is not valid JSON"),
    (json.dumps(BASE), ["nokey"], "--set takes key=value, got 'nokey'"),
    (json.dumps({**BASE, "instance_id": "x"}), [], "'instance_id' is set by the supervisor"),
    (json.dumps({**BASE, "host_application": {"kind": "k8s", "application_id": "x"}}), [],
     "'host_application' is set by the supervisor"),
    (json.dumps({**BASE, "num_standby_replica": 1}), [], "unknown streams config key 'num_standby_replica'"),
])
def test_bad_config_values_are_named(inline, sets, message):
    with pytest.raises(ConfigError, match=message):
        parse_config_values(None, inline, sets)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="cannot read streams config file .*nothere.json"):
        parse_config_values(str(tmp_path / "nothere.json"), None, [])


@pytest.mark.parametrize("master, conf, attempts", [
    ("local[3,2]", {}, 2), ("local[2]", {"spark.task.maxFailures": "8"}, 1), ("local", {}, 1),
    ("local[*,4]", {}, 4), ("yarn", {}, 4), ("spark://h:7077", {"spark.task.maxFailures": "2"}, 2),
])
def test_task_attempts_follow_the_master(master, conf, attempts):
    assert task_attempts(master, conf) == attempts


def test_bad_topology_reference_exits_2_before_spark_starts(capsys):
    code = main(["--topology", "no_such_module_xyz:build", "--config-json", json.dumps(BASE)])
    assert code == 2
    assert "cannot import module 'no_such_module_xyz'" in capsys.readouterr().err


@pytest.mark.parametrize("values, message", [
    ({**BASE, "consumer_configs": {"session_timeout_ms": "abc"}},
     "error: consumer_configs: session_timeout_ms must be an int >= 0, got str 'abc'"),
    ({**BASE, "application_id": "a" * 235}, "error: a repartition topic would be illegal"),  # <app>-...-repartition
])
def test_a_setting_an_instance_would_refuse_exits_2_before_spark_starts(capsys, values, message):
    code = main(["--topology", "airflow_stateful_provider.examples.clicks_and_payments:build_topology",
                 "--config-json", json.dumps(values)])
    assert code == 2
    assert capsys.readouterr().err.startswith(message)
