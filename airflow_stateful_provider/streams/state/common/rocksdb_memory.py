"""An instance's RocksDB memory budget, and the user's own RocksDB options.

Why: each RocksDB store has its memtables, its block cache and, loaded per SST file, its
index and filter blocks. Left alone, that memory grows with the number of stores (tasks x
stores) and with their size (the filters of a 5M-key store alone are several MB). As in Kafka
Streams' ``BoundedMemoryRocksDBConfig`` example, all stores of an instance share:

- one LRU block cache of ``rocksdb_memory_bytes``, which also holds the index and filter
  blocks (``cache_index_and_filter_blocks``; those of level 0 stay pinned), and
- one write buffer manager that charges every memtable to that cache and flushes the
  largest memtable once all of them together near ``rocksdb_write_buffer_bytes``.

So the block cache, the memtables, and the index and filter blocks together stay within
``rocksdb_memory_bytes``. What the budget does not bound: blocks pinned by open iterators,
RocksDB's per-file table readers beyond index and filters, and everything outside RocksDB
(Python objects, the record caches, the clients' buffers). rocksdict 0.3.29 exposes no
``strict_capacity_limit`` for the cache (RocksDB may go past the capacity while blocks are
pinned) and no high-priority pool for index and filter blocks.

``rocksdb_config_setter`` is Kafka Streams' ``rocksdb.config.setter``: a callable given each
store's name and its ``rocksdict.Options`` after the engine set its own, before the store
opens. Replacing the block-based table factory there takes the store out of the shared cache.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

import rocksdict

from airflow_stateful_provider.streams.errors import ConfigError

__all__ = [
    "DEFAULT_ROCKSDB_MEMORY_BYTES",
    "DEFAULT_ROCKSDB_WRITE_BUFFER_BYTES",
    "RocksDBMemory",
    "check_rocksdb_settings",
    "process_default_memory",
]

#: Default ``rocksdb_memory_bytes``: block cache, memtables, index and filter blocks of all
#: the stores of one instance.
DEFAULT_ROCKSDB_MEMORY_BYTES = 128 << 20
#: Default ``rocksdb_write_buffer_bytes``: the memtables' share of the budget.
DEFAULT_ROCKSDB_WRITE_BUFFER_BYTES = 32 << 20
#: Smallest budget accepted: below it RocksDB flushes a memtable every few hundred writes.
MIN_ROCKSDB_MEMORY_BYTES = 4 << 20
MIN_ROCKSDB_WRITE_BUFFER_BYTES = 1 << 20
#: Each store's memtable size before it is flushed on its own (the write buffer manager
#: flushes earlier when all memtables together reach the budget).
_STORE_WRITE_BUFFER_BYTES = 16 << 20
#: The memtable bloom filter's share of a memtable (RocksDB's memtable_prefix_bloom_size_ratio).
_MEMTABLE_FILTER_RATIO = 0.1

ConfigSetter = Callable[[str, rocksdict.Options], None]


def check_rocksdb_settings(memory_bytes: Any, write_buffer_bytes: Any, config_setter: Any) -> None:
    """ConfigError naming the value for a budget that is not a whole number of bytes in range,
    a write buffer share larger than the budget, or a setter that is neither a callable nor
    an import path ``package.module:function``."""
    for name, value, minimum in (("rocksdb_memory_bytes", memory_bytes, MIN_ROCKSDB_MEMORY_BYTES),
                                 ("rocksdb_write_buffer_bytes", write_buffer_bytes, MIN_ROCKSDB_WRITE_BUFFER_BYTES)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an int (bytes), got {type(value).__name__} {value!r}")
        if value < minimum:
            raise ConfigError(f"{name} must be at least {minimum} bytes ({minimum >> 20} MiB), got {value}")
    if write_buffer_bytes > memory_bytes:
        raise ConfigError(f"rocksdb_write_buffer_bytes ({write_buffer_bytes}) must not exceed rocksdb_memory_bytes "
                          f"({memory_bytes}): the memtables are charged to that budget")
    if config_setter is None or callable(config_setter):
        return
    if not isinstance(config_setter, str) or not _is_import_path(config_setter):
        raise ConfigError(f"rocksdb_config_setter must be a callable (store_name, options) or an import path "
                          f"'package.module:function', got {config_setter!r}")


def _is_import_path(value: str) -> bool:
    module, sep, attribute = value.partition(":")
    return bool(sep and module and attribute) and all(part.isidentifier() for part in (*module.split("."), attribute))


def _resolve_setter(value: Any) -> ConfigSetter | None:
    if value is None:
        return None
    if callable(value):
        given: ConfigSetter = value
        return given
    module_name, _, attribute = value.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"rocksdb_config_setter {value!r}: cannot import {module_name!r} ({exc}); install it "
                          f"where the instances run") from None
    target = getattr(module, attribute, None)
    if not callable(target):
        raise ConfigError(f"rocksdb_config_setter {value!r}: module {module_name!r} has no callable {attribute!r}")
    setter: ConfigSetter = target
    return setter


class RocksDBMemory:
    """The shared block cache and write buffer manager of one instance, and the options each
    of its stores opens RocksDB with (see module docstring)."""

    def __init__(self, memory_bytes: int = DEFAULT_ROCKSDB_MEMORY_BYTES,
                 write_buffer_bytes: int = DEFAULT_ROCKSDB_WRITE_BUFFER_BYTES,
                 config_setter: Any = None) -> None:
        check_rocksdb_settings(memory_bytes, write_buffer_bytes, config_setter)
        self.memory_bytes = memory_bytes
        self.write_buffer_bytes = write_buffer_bytes
        self._config_setter = _resolve_setter(config_setter)
        self.cache = rocksdict.Cache(memory_bytes)
        self.write_buffer_manager = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            write_buffer_bytes, False, self.cache)

    @classmethod
    def for_config(cls, config: Any) -> RocksDBMemory:
        """The budget a ``StreamsConfig`` asks for."""
        return cls(config.rocksdb_memory_bytes, config.rocksdb_write_buffer_bytes, config.rocksdb_config_setter)

    def usage(self) -> dict[str, int]:
        """Bytes in use now: the whole cache (memtables included) and the memtables alone."""
        return {"cache_bytes": self.cache.get_usage(), "memtable_bytes": self.write_buffer_manager.get_usage()}

    def options(self, store_name: str, *, create: bool) -> rocksdict.Options:
        """A store's options: the engine's, then the user's setter."""
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(create)
        opts.set_write_buffer_size(min(_STORE_WRITE_BUFFER_BYTES, self.write_buffer_bytes // 4))
        opts.set_max_write_buffer_number(3)
        opts.set_write_buffer_manager(self.write_buffer_manager)
        opts.set_max_background_jobs(2)
        opts.set_keep_log_file_num(2)
        # bloom filter over memtable keys: point lookups skip the skiplist walk for absent
        # keys and, in practice, the reads of recently written keys got faster too
        opts.set_memtable_whole_key_filtering(True)
        opts.set_memtable_prefix_bloom_ratio(_MEMTABLE_FILTER_RATIO)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # point lookups on absent keys skip SST reads
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        opts.set_block_based_table_factory(table)
        if self._config_setter is not None:
            try:
                self._config_setter(store_name, opts)
            except Exception as exc:  # the user's code: named with its error
                name = getattr(self._config_setter, "__qualname__", repr(self._config_setter))
                raise ConfigError(f"rocksdb_config_setter {name} failed for store {store_name!r}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        return opts

    def memtable_filter(self, *, on: bool) -> dict[str, str] | None:
        """The options (for RocksDB's SetOptions on an open store) that turn the memtable bloom
        filter of :meth:`options` off while a store restores and on again once it serves its
        task: nothing reads a restoring store, and each write into its memtable would pay for
        a filter insert (a third of the write, docs/benchmarks.md "State at scale"). None
        with a ``rocksdb_config_setter``: the user's options are left as the setter made them."""
        if self._config_setter is not None:
            return None
        return {"memtable_whole_key_filtering": "true" if on else "false",
                "memtable_prefix_bloom_size_ratio": str(_MEMTABLE_FILTER_RATIO if on else 0.0)}


_default_lock = threading.Lock()
_process_default: RocksDBMemory | None = None


def process_default_memory() -> RocksDBMemory:
    """The default budget of stores opened outside an instance (offline tools, tests that
    build stores directly): one per process."""
    global _process_default
    with _default_lock:
        if _process_default is None:
            _process_default = RocksDBMemory()
        return _process_default
