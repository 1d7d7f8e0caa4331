"""Store kinds: what the runtime and the tools know of one kind of store, and their registry.

A kind lives in a folder of its own (``state/keyvalue/``, ``state/session/``,
``state/versioned/``): its stores, changelogging wrapper, typed view, builder, and in
``kind.py`` the :class:`StoreKind` it registers. The runtime reaches a kind through the
builder of each store (``StoreBuilder.kind``, ``StoreBuilder.build``); the tools that
start from a directory (``open_store``, the maintenance operators, snapshot loading)
through this registry, by the ``store_type`` of the directory's metadata.
"""

from __future__ import annotations

import dataclasses

from airflow_stateful_provider.streams.errors import ConfigError, InvalidStoreError
from airflow_stateful_provider.streams.state.common.metadata import MetadataKind, register_metadata_kind
from airflow_stateful_provider.streams.state.common.rocks import RocksDBStore

__all__ = ["StoreKind", "maintainable_store_types", "register_store_kind", "store_kind", "store_kinds"]


@dataclasses.dataclass(frozen=True)
class StoreKind:
    """One kind of store.

    ``name`` is how the runtime and the TopologyTestDriver call it ("key_value");
    ``metadata`` what its directories' ``store-metadata.json`` holds (the ``store_type``
    and settings). ``persistent_store`` is its RocksDB store class, which opens an existing
    directory from ``(path, *, name, key_serde, value_serde, read_only)``, taking every
    other setting from the directory (None: the kind has no persistent store).
    ``maintainable``: ``enforce_retention`` and ``compact`` act on its stores (control
    commands and the maintenance operators pick these).
    """

    name: str
    metadata: MetadataKind
    persistent_store: type[RocksDBStore] | None
    maintainable: bool = False

    @property
    def store_type(self) -> str:
        return self.metadata.store_type


#: store_type -> kind, in registration order.
_KINDS: dict[str, StoreKind] = {}


def register_store_kind(kind: StoreKind) -> StoreKind:
    """Make ``kind`` known to the tools that start from a store directory; returns it.

    Each kind's ``kind.py`` calls this once; registering the same kind again is harmless,
    another kind under a registered ``store_type`` or name is refused.
    """
    for other in _KINDS.values():
        if (other.store_type == kind.store_type or other.name == kind.name) and other != kind:
            raise ConfigError(f"store kind {kind.name!r} (store_type {kind.store_type!r}) clashes with the "
                              f"registered kind {other.name!r} (store_type {other.store_type!r})")
    register_metadata_kind(kind.metadata)
    _KINDS[kind.store_type] = kind
    return kind


def store_kind(store_type: str) -> StoreKind:
    """The registered kind whose directories have ``store_type``."""
    kind = _KINDS.get(store_type)
    if kind is None:
        raise InvalidStoreError(f"unknown store type {store_type!r}; expected one of {list(_KINDS)}")
    return kind


def store_kinds() -> tuple[StoreKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def maintainable_store_types() -> tuple[str, ...]:
    """The ``store_type`` of every kind that retention and compaction act on."""
    return tuple(kind.store_type for kind in _KINDS.values() if kind.maintainable)
