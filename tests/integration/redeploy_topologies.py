"""Versions of one application's topology for the redeploy tests, loaded by reference
(``tests.integration.redeploy_topologies:<function>``) by the plan command and the operator.

Application ``redeploy-<suffix>`` reads ``redeploy-in-<suffix>`` and writes
``redeploy-out-<suffix>``; its processor holds the stores each version names."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_stateful_provider.streams import Processor, Serdes, Stores, StreamsConfig, Topology


def topic_names(application_id: str) -> tuple[str, str]:
    suffix = application_id.removeprefix("redeploy-")
    return f"redeploy-in-{suffix}", f"redeploy-out-{suffix}"


class Forward(Processor):
    def process(self, record: Any) -> None:
        self.context.forward(record)


def _topology(config: StreamsConfig, *builders: Any) -> Topology:
    source, sink = topic_names(config.application_id)
    topology = Topology().add_source("in", source).add_processor("p", Forward, "in").add_sink("out", sink, "p")
    for builder in builders:
        topology.add_state_store(builder, "p")
    return topology


def _counts(value_serde: Any) -> Any:
    return Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), Serdes.string(), value_serde)


def _store(name: str) -> Any:
    return Stores.session_store_builder(Stores.persistent_session_store(name, timedelta(hours=1)), Serdes.string(),
                                        Serdes.json())


def counts_and_visits(config: StreamsConfig) -> Topology:
    """The version that ran: a count per key and the visits per session."""
    return _topology(config, _counts(Serdes.int64()), _store("visits"))


def counts_and_refunds(config: StreamsConfig) -> Topology:
    """Keeps the counts, drops the visits, adds refunds: compatible."""
    return _topology(config, _counts(Serdes.int64()), _store("refunds"))


def counts_as_strings(config: StreamsConfig) -> Topology:
    """The counts' values as strings: a change the stored int64 values cannot follow."""
    return _topology(config, _counts(Serdes.string()), _store("visits"))
