"""The counter kind's registration: how ``open_store`` and the tools find its directories."""

from __future__ import annotations

from airflow_stateful_provider.streams.state.common.kind import StoreKind, register_store_kind
from tests.counter_kind.stores import METADATA, RocksDBCounterStore

__all__ = ["COUNTER"]

COUNTER = register_store_kind(StoreKind("counter", METADATA, RocksDBCounterStore))
