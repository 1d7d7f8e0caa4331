"""What the example topology must output for given input records, and what it did output.

The oracle is written from docs/semantics.md §4 and §5, not from the engine's code: it replays
the records in send order per partition (Kafka's default partitioner, so pass the input
topics' partition count; the TopologyTestDriver runs one partition).

- Sessions: per partition, stream time is the largest click time so far; a click merges
  with its user's sessions within the gap; it is late (dropped) when the merged session
  ends before ``stream time - grace - gap``. After every click, each session whose end
  fell below that close time since the last click is emitted once (on window close).
  Exact when the engine runs with ``windowed_aggregation_emit_interval_ms=0`` (otherwise
  emission is throttled by wall-clock time) and tasks do not move while processing (a new
  task owner starts with an unknown stream time).
- Payments: each payment is priced with the rates sent before it: the version with the
  greatest time <= the payment's time, or, for a payment older than the partition's
  observed rate time minus the history retention, only the newest version. Exact when
  rates are processed before the payments that follow them, which ``produce()`` and the
  integration test arrange (rates first, payments after the rates are committed).

``read_outputs`` reads the two output topics and reduces them to the final value per key
(last value wins, a tombstone deletes), in the same shapes as the oracle's results.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_stateful_provider.examples.clicks_and_payments import (
    DEFAULT_RATES_HISTORY_RETENTION_MS,
    DEFAULT_SESSION_GAP_MS,
    DEFAULT_SESSION_GRACE_MS,
    DEFAULT_SESSIONS_RETENTION_MS,
    PAYMENTS_USD_TOPIC,
    SESSIONS_TOPIC,
)
from airflow_stateful_provider.examples.generator import CLICK, PAYMENT, RATE, GeneratedRecord

__all__ = ["ExampleOutputs", "SessionKey", "expected_late_clicks", "expected_payments_usd", "expected_sessions",
           "partition_for", "read_outputs"]

#: (user, session start, session end): how sessions are keyed in results.
SessionKey = tuple[str, int, int]


def partition_for(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2 of the UTF-8 key; kafka-python and
    the Java client agree) gives ``key``."""
    from kafka.partitioner import murmur2

    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@dataclasses.dataclass
class _Session:
    start: int
    end: int
    clicks: int
    pages: set[str]


def _sessionize(records: Iterable[GeneratedRecord], gap_ms: int, grace_ms: int, partitions: int,
                retention_ms: int) -> tuple[dict[SessionKey, dict[str, Any]], int]:
    clicks = [r for r in records if r.kind == CLICK]
    if clicks:
        span = max(r.timestamp for r in clicks) - min(r.timestamp for r in clicks)
        if span >= retention_ms:
            raise ValueError(
                f"clicks span {span} ms, not less than the sessions retention {retention_ms} ms: the store then "
                f"expires sessions by segment, which this oracle does not model; use a shorter data set")
    stream_time = [-1] * partitions
    last_close = [-1] * partitions
    open_sessions: list[dict[str, list[_Session]]] = [{} for _ in range(partitions)]
    emitted: dict[SessionKey, dict[str, Any]] = {}
    late = 0
    for click in clicks:
        user, ts, page = click.key, click.timestamp, click.value["page"]
        p = partition_for(user, partitions)
        stream_time[p] = max(stream_time[p], ts)
        close = stream_time[p] - grace_ms - gap_ms
        sessions = open_sessions[p].setdefault(user, [])
        touching = [s for s in sessions if s.end >= ts - gap_ms and s.start <= ts + gap_ms]
        start = min([ts] + [s.start for s in touching])
        end = max([ts] + [s.end for s in touching])
        if end < close:
            late += 1
        else:
            for s in touching:
                sessions.remove(s)
            sessions.append(_Session(start, end, 1 + sum(s.clicks for s in touching),
                                     {page}.union(*(s.pages for s in touching))))
        if close > last_close[p] and close >= 1:
            for other, their_sessions in open_sessions[p].items():
                for s in their_sessions:
                    if max(last_close[p], 0) <= s.end < close:
                        emitted[(other, s.start, s.end)] = {"user": other, "start": s.start, "end": s.end,
                                                            "clicks": s.clicks, "pages": sorted(s.pages)}
            last_close[p] = close
    return emitted, late


def expected_sessions(records: Iterable[GeneratedRecord], gap_ms: int = DEFAULT_SESSION_GAP_MS,
                      grace_ms: int = DEFAULT_SESSION_GRACE_MS, *, partitions: int = 1,
                      retention_ms: int = DEFAULT_SESSIONS_RETENTION_MS) -> dict[SessionKey, dict[str, Any]]:
    """The sessions the topology emits, keyed (user, start, end), valued as on ``user-sessions``."""
    return _sessionize(records, gap_ms, grace_ms, partitions, retention_ms)[0]


def expected_late_clicks(records: Iterable[GeneratedRecord], gap_ms: int = DEFAULT_SESSION_GAP_MS,
                         grace_ms: int = DEFAULT_SESSION_GRACE_MS, *, partitions: int = 1,
                         retention_ms: int = DEFAULT_SESSIONS_RETENTION_MS) -> int:
    """How many clicks the session aggregation drops as late (metric ``dropped-records-total:late``)."""
    return _sessionize(records, gap_ms, grace_ms, partitions, retention_ms)[1]


def expected_payments_usd(records: Iterable[GeneratedRecord], *,
                          history_retention_ms: int = DEFAULT_RATES_HISTORY_RETENTION_MS,
                          partitions: int = 1) -> dict[str, dict[str, Any]]:
    """Every payment priced as on ``payments-usd``, keyed by payment id (see module docstring)."""
    versions: dict[str, dict[int, dict[str, Any]]] = {}  # currency -> valid_from -> rate value
    observed = [-1] * partitions
    result: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.kind == RATE:
            p = partition_for(record.key, partitions)
            if observed[p] >= 0 and record.timestamp < observed[p] - history_retention_ms:
                continue  # older than the history retention: not put
            observed[p] = max(observed[p], record.timestamp)
            versions.setdefault(record.key, {})[record.timestamp] = record.value
        elif record.kind == PAYMENT:
            payment = record.value
            currency, ts = payment["currency"], record.timestamp
            timeline = versions.get(currency, {})
            p = partition_for(currency, partitions)
            if ts < observed[p] - history_retention_ms:
                newest = max(timeline, default=None)
                valid_from = newest if newest is not None and newest <= ts else None
            else:
                valid_from = max((t for t in timeline if t <= ts), default=None)
            if valid_from is None:
                result[payment["payment_id"]] = {**payment, "rate": None, "rate_ts": None, "amount_usd": None}
            else:
                rate = timeline[valid_from]["rate_to_usd"]
                result[payment["payment_id"]] = {**payment, "rate": rate, "rate_ts": valid_from,
                                                 "amount_usd": round(payment["amount"] * rate, 2)}
    return result


@dataclasses.dataclass(frozen=True)
class ExampleOutputs:
    """The output topics reduced to their final value per key."""

    sessions: dict[SessionKey, dict[str, Any]]
    payments_usd: dict[str, dict[str, Any]]
    records_read: int


def read_outputs(bootstrap_servers: str, *, sessions_topic: str = SESSIONS_TOPIC,
                 payments_usd_topic: str = PAYMENTS_USD_TOPIC, client_configs: Mapping[str, Any] | None = None,
                 timeout_s: float = 60) -> ExampleOutputs:
    """Read both output topics from the beginning to their current end offsets."""
    from airflow_stateful_provider.streams import Serdes, SessionWindowedSerde

    windowed, json = SessionWindowedSerde(Serdes.string()), Serdes.json()

    def session_key(raw: bytes) -> SessionKey:
        key = windowed.deserialize(raw)
        if key is None:
            raise ValueError("a session output record without a key")
        return (key.key, key.window.start, key.window.end)

    sessions, n_sessions = _read_table(bootstrap_servers, sessions_topic, session_key, json.deserialize,
                                       client_configs, timeout_s)
    payments, n_payments = _read_table(bootstrap_servers, payments_usd_topic, lambda raw: raw.decode(),
                                       json.deserialize, client_configs, timeout_s)
    return ExampleOutputs(sessions, payments, n_sessions + n_payments)


def _read_table(bootstrap_servers: str, topic: str, decode_key: Any, decode_value: Any,
                client_configs: Mapping[str, Any] | None, timeout_s: float) -> tuple[dict[Any, Any], int]:
    from kafka import KafkaConsumer, TopicPartition

    # read_committed: an exactly-once application's aborted transactions are not output
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             isolation_level="read_committed", **dict(client_configs or {}))
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            raise ValueError(f"output topic {topic!r} does not exist (or has no partitions)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        table: dict[Any, Any] = {}
        read = 0
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                positions = {tp.partition: consumer.position(tp) for tp in tps}
                raise TimeoutError(f"reading {topic!r}: positions {positions} did not reach the end offsets "
                                   f"{ {tp.partition: o for tp, o in ends.items()} } within {timeout_s}s")
            batches = consumer.poll(timeout_ms=500)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                for record in batches[tp]:
                    if record.offset >= ends[tp]:
                        continue
                    read += 1
                    key = decode_key(record.key)
                    if record.value is None:
                        table.pop(key, None)
                    else:
                        table[key] = decode_value(record.value)
        return table, read
    finally:
        consumer.close()
