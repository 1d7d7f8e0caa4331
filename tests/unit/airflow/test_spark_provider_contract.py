"""The two private members of the Spark provider's SparkSubmitHook that SubmitTopologyOperator
relies on (pyproject.toml bounds the provider to the major they were checked with):
``_connection`` (the resolved master and deploy mode) and ``_build_spark_submit_command``
(the command a detached spark-submit runs). A provider release that changes them fails here."""

from __future__ import annotations

import json

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_stateful_provider.operators.submit import _master_and_deploy_mode


@pytest.mark.parametrize("connection, deploy_mode, expected", [
    ({"conn_type": "spark", "host": "local[3,2]"}, None, ("local[3,2]", None)),
    ({"conn_type": "spark", "host": "spark://master", "port": 7077, "extra": {"deploy-mode": "client"}}, None,
     ("spark://master:7077", "client")),
    ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}}, "cluster", ("yarn", "cluster")),
])
def test_the_resolved_master_and_deploy_mode(monkeypatch, connection, deploy_mode, expected):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    assert _master_and_deploy_mode(SparkSubmitHook(deploy_mode=deploy_mode)) == expected


def test_the_spark_submit_command_carries_master_conf_application_and_arguments(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    hook = SparkSubmitHook(conf={"spark.speculation": "false"}, name="stateful-streams",
                           application_args=["--instances", "2"], env_vars={"SECRET": "not on the command line"})
    command = hook._build_spark_submit_command("/opt/app.py")
    assert command[0] == "spark-submit"
    assert command[command.index("--master") + 1] == "local[2]"
    assert "spark.speculation=false" in command and command[command.index("spark.speculation=false") - 1] == "--conf"
    assert command[-3:] == ["/opt/app.py", "--instances", "2"]
    assert not any("not on the command line" in part for part in command)
