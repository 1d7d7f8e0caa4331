"""Run one streams instance in this process until SIGTERM or SIGINT.

    python -m airflow_stateful_provider.streams.runner \
        --topology package.module:function --config streams.json [--set key=value ...]

``function()`` returns a Topology (or a StreamsBuilder). The config file holds
StreamsConfig values as JSON; ``--set`` overrides single values (JSON-parsed when
possible). SIGTERM/SIGINT close the instance cleanly (commit, checkpoint, leave the
group); the exit code is 0 after a clean stop and 1 when the instance ended in ERROR.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.errors import ConfigError, TopologyError
from airflow_stateful_provider.streams.topology import Topology

__all__ = ["load_topology", "load_config", "main"]

log = logging.getLogger(__name__)


def load_topology(reference: str) -> Topology:
    """Import ``package.module:function`` and call it; it must return a Topology or a
    StreamsBuilder."""
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
    built = factory()
    if hasattr(built, "build") and not isinstance(built, Topology):
        built = built.build()
    if not isinstance(built, Topology):
        raise TopologyError(f"{reference!r} returned {type(built).__name__}, not a Topology or StreamsBuilder")
    return built


def load_config(path: str | None, overrides: list[str]) -> StreamsConfig:
    values: dict[str, Any] = {}
    if path:
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read streams config file {path!r}: {exc}") from exc
        if not isinstance(values, dict):
            raise ConfigError(f"streams config file {path!r} must hold a JSON object, got {type(values).__name__}")
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set takes key=value, got {item!r}")
        try:
            values[key] = json.loads(raw)
        except json.JSONDecodeError:
            values[key] = raw
    return StreamsConfig.from_mapping(values)


def main(argv: list[str] | None = None) -> int:
    from airflow_stateful_provider.streams.runtime.kafka_streams import KafkaStreams, KafkaStreamsState

    parser = argparse.ArgumentParser(prog="python -m airflow_stateful_provider.streams.runner",
                                     description="Run one streams instance until SIGTERM.")
    parser.add_argument("--topology", required=True, help="package.module:function returning a Topology")
    parser.add_argument("--config", help="JSON file of StreamsConfig values")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config value")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        config = load_config(args.config, args.set)
        topology = load_topology(args.topology)
    except (ConfigError, TopologyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    streams = KafkaStreams(topology, config)
    streams.set_state_listener(lambda new, old: (new in (KafkaStreamsState.ERROR, KafkaStreamsState.NOT_RUNNING))
                               and stop.set())
    streams.start()
    stop.wait()
    streams.close()
    if streams.state is KafkaStreamsState.ERROR:
        error = next((t.error for t in streams.threads if t.error is not None), None)
        print(f"error: instance ended in ERROR: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
