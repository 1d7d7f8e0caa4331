"""A store kind that lives in the tests only: per key a 64-bit counter, ``add(key, delta)``.

It shows that a store kind is one folder: its stores on RocksDB and in memory
(stores.py), its registration (kind.py), its changelogging wrapper, typed view and builder
(builder.py). Nothing in the engine names it; importing this package registers it, and a
topology adds it with ``topology.add_state_store(counter_store("name"), processor)``.
docs/architecture.md walks through adding a kind.
"""

from tests.counter_kind.builder import CounterStoreBuilder, TypedCounterStore, counter_store
from tests.counter_kind.kind import COUNTER

__all__ = ["COUNTER", "CounterStoreBuilder", "TypedCounterStore", "counter_store"]
