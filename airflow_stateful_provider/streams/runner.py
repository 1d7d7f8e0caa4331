"""Run one streams instance in this process until SIGTERM or SIGINT.

    python -m airflow_stateful_provider.streams.runner \
        --topology package.module:function --config streams.json [--set key=value ...]

``function()`` (or ``function(config)``, given the StreamsConfig, e.g. to read topic names
from ``app_configs``) returns a Topology or a StreamsBuilder. ``--events-file`` appends one
JSON line per restoration and standby event (restore start/batch/end/suspended, update
start/batch/suspended), for tests and for following a restoration after the fact. The config file holds
StreamsConfig values as JSON; ``--set`` overrides single values (JSON-parsed when
possible). SIGTERM/SIGINT close the instance cleanly (commit, checkpoint, leave the
group); a restart command on the control topic starts it again in this process with the next
epoch (instance/host.py); the exit code is 0 after a clean stop, 1 when the instance ended in ERROR and 2 when
it could not start (a bad setting or topology, unreachable brokers, a state directory of
another application: one line on stderr). SIGUSR1 writes every thread's stack to stderr
(faulthandler: it works even while a thread holds the interpreter lock), for an instance that
hangs.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import inspect
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import ConfigError, StreamsError, TopologyError
from airflow_stateful_provider.streams.process_logging import configure_process_logging
from airflow_stateful_provider.streams.topology.topology import Topology

__all__ = ["EventFileListener", "config_values", "load_topology", "load_config", "main"]

log = logging.getLogger(__name__)


def load_topology(reference: str, config: StreamsConfig | None = None) -> Topology:
    """Import ``package.module:function`` and call it (with ``config`` when it takes one
    argument); it must return a Topology or a StreamsBuilder."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise TopologyError(f"topology reference must be 'package.module:function', got {reference!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TopologyError(f"cannot import module {module_name!r} of topology reference {reference!r}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise TopologyError(f"{reference!r}: module {module_name!r} has no callable {attribute!r}")
    try:
        wants_config = len(inspect.signature(factory).parameters) == 1
    except (TypeError, ValueError):
        wants_config = False
    built = factory(config) if wants_config else factory()
    if hasattr(built, "build") and not isinstance(built, Topology):
        built = built.build()
    if not isinstance(built, Topology):
        raise TopologyError(f"{reference!r} returned {type(built).__name__}, not a Topology or StreamsBuilder")
    return built


def config_values(path: str | None, overrides: list[str], inline: str | None = None) -> dict[str, Any]:
    """StreamsConfig values from a JSON file, an inline JSON object and ``key=value``
    overrides (later wins; a value is JSON-parsed when it parses). Not validated yet."""
    values: dict[str, Any] = {}
    for source, read in ((f"streams config file {path!r}", path and (lambda: Path(path).read_text())),
                         ("--config-json", inline is not None and (lambda: inline))):
        if not read:
            continue
        try:
            loaded = json.loads(read())
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source} is not valid JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source} must hold a JSON object, got {type(loaded).__name__}")
        values.update(loaded)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set takes key=value, got {item!r}")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return values


def load_config(path: str | None, overrides: list[str]) -> StreamsConfig:
    return StreamsConfig.from_mapping(config_values(path, overrides))


class EventFileListener:
    """Restore and standby listener writing each event as a JSON line (flushed at once)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def _write(self, event: str, partition: Any, store: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "topic": partition[0], "partition": partition[1], "store": store,
                           "at_ms": wall_clock_ms(), **fields})
        with self._lock:
            self._file.write(line + "\n")

    def on_restore_start(self, partition, store_name, start_offset, end_offset):
        self._write("restore_start", partition, store_name, start_offset=start_offset, end_offset=end_offset)

    def on_batch_restored(self, partition, store_name, batch_end_offset, num_restored):
        self._write("restore_batch", partition, store_name, batch_end_offset=batch_end_offset, count=num_restored)

    def on_restore_end(self, partition, store_name, total_restored):
        self._write("restore_end", partition, store_name, total=total_restored)

    def on_restore_suspended(self, partition, store_name, total_restored):
        self._write("restore_suspended", partition, store_name, total=total_restored)

    def on_update_start(self, partition, store_name, start_offset):
        self._write("standby_start", partition, store_name, start_offset=start_offset)

    def on_batch_loaded(self, partition, store_name, task_id, batch_end_offset, batch_size, current_end_offset):
        self._write("standby_batch", partition, store_name, batch_end_offset=batch_end_offset, count=batch_size,
                    end_offset=current_end_offset)

    def on_update_suspended(self, partition, store_name, store_offset, current_end_offset, reason):
        self._write("standby_suspended", partition, store_name, store_offset=store_offset,
                    end_offset=current_end_offset, reason=reason.value)


def main(argv: list[str] | None = None) -> int:
    from airflow_stateful_provider.streams.instance.host import InstanceHost
    from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState

    parser = argparse.ArgumentParser(prog="python -m airflow_stateful_provider.streams.runner",
                                     description="Run one streams instance until SIGTERM.")
    parser.add_argument("--topology", required=True, help="package.module:function returning a Topology")
    parser.add_argument("--config", help="JSON file of StreamsConfig values")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config value")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--events-file", help="append restoration and standby events here as JSON lines")
    args = parser.parse_args(argv)
    configure_process_logging(args.log_level)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: where each thread is
    events = EventFileListener(args.events_file) if args.events_file else None

    def build(config: StreamsConfig) -> KafkaStreams:
        streams = KafkaStreams(load_topology(args.topology, config), config)
        if events is not None:
            streams.set_global_state_restore_listener(events)
            streams.set_standby_update_listener(events)
        return streams

    try:
        host = InstanceHost(build, load_config(args.config, args.set))
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: host.request_stop())
        host.start()  # checks the brokers and the settings before it creates anything
        streams = host.run()  # a restart command starts the next incarnation in this process
    except StreamsError as exc:  # a bad setting, unreachable brokers, missing topics, foreign state, a newer epoch
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if streams.state is KafkaStreamsState.ERROR:
        error = next((t.error for t in streams.threads if t.error is not None), None)
        print(f"error: instance ended in ERROR: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
