"""Broker tooling checks that need neither Java nor a broker."""

from __future__ import annotations

import pytest

from tools.kafka import broker as broker_tools


def test_missing_java_is_one_line_naming_java_and_how_to_get_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(broker_tools.MissingToolError) as info:
        broker_tools.require_java()
    message = str(info.value)
    assert "'java' not found" in message and "apt-get install" in message and "\n" not in message


def test_missing_maven_is_reported_before_resolving(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(broker_tools, "RESOLVED_MARKER", tmp_path / "absent")
    with pytest.raises(broker_tools.MissingToolError, match="'mvn' not found"):
        broker_tools.resolve_jars()


def test_cluster_ids_are_kafka_uuids():
    cluster_id = broker_tools._random_cluster_id()
    assert len(cluster_id) == 22 and "=" not in cluster_id
