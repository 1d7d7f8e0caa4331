"""``stateful-streams stop``: arguments, usage errors, and who is asked to answer."""

from __future__ import annotations

import io

import pytest

from airflow_stateful_provider.cli import BOOTSTRAP_ENV, build_parser, main
from airflow_stateful_provider.streams.control.channel import live_instances
from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.status.application import build_application_status
from airflow_stateful_provider.streams.status.document import InstanceStatus


def test_defaults():
    args = build_parser().parse_args(["stop", "clicks", "--bootstrap-servers", "b:9092"])
    assert (args.command, args.application_id, args.bootstrap_servers) == ("stop", "clicks", "b:9092")
    assert args.instances is None and args.timeout == 120.0 and args.json is False


def test_repeated_instances_timeout_and_json():
    args = build_parser().parse_args(["stop", "clicks", "--bootstrap-servers", "b:9092", "--instance", "i-1",
                                      "--instance", "i-2", "--timeout", "5", "--json"])
    assert args.instances == ["i-1", "i-2"] and args.timeout == 5.0 and args.json is True


def test_bootstrap_servers_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv(BOOTSTRAP_ENV, "127.0.0.1:1")
    assert main(["stop", "clicks", "--timeout", "1"], out=io.StringIO()) == 3
    assert "cannot reach Kafka at 127.0.0.1:1" in capsys.readouterr().err


def test_missing_servers_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["stop", "clicks"], out=io.StringIO())
    assert exit_info.value.code == 2
    assert "stop needs --conn-id or --bootstrap-servers" in capsys.readouterr().err


def test_a_non_positive_timeout_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["stop", "clicks", "--bootstrap-servers", "b:9092", "--timeout", "0"], out=io.StringIO())
    assert exit_info.value.code == 2
    assert "--timeout takes a positive number of seconds, got 0" in capsys.readouterr().err


def test_unreachable_brokers_exit_3(capsys):
    code = main(["stop", "clicks", "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1"], out=io.StringIO())
    assert code == 3
    assert "127.0.0.1:1" in capsys.readouterr().err


def doc(instance_id: str, state: str, published_at: int) -> InstanceStatus:
    return InstanceStatus(instance_id=instance_id, application_id="app", state=state, epoch=1, host="h", pid=1,
                          process_id="p", published_at=published_at)


def test_live_instances_are_the_addressed_fresh_running_ones():
    status = build_application_status([doc("a", "RUNNING", 100_000), doc("b", "REBALANCING", 100_000),
                                       doc("stale", "RUNNING", 0), doc("dead", "ERROR", 100_000),
                                       doc("done", "NOT_RUNNING", 100_000)], {}, now_ms=100_000,
                                      stale_after_ms=30_000)
    assert live_instances(status, new_command("app", "stop")) == ("a", "b")
    assert live_instances(status, new_command("app", "stop", instances=["b", "stale"])) == ("b",)
