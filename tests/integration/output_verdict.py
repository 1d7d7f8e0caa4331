"""The example pipeline's output topics against the oracle, key by key (for the crash test).

:func:`read_topic` reads every record of an output topic (``read_committed`` unless told
otherwise); :func:`compare_outputs` counts them per key against the oracle and returns a
:class:`TopicVerdict`: missing, unexpected, duplicated and wrong keys, with examples.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from airflow_stateful_provider.examples.expected import SessionKey


@dataclasses.dataclass(frozen=True)
class OutputRecord:
    key: Any
    value: Any
    partition: int
    offset: int


def read_topic(bootstrap_servers: str, topic: str, decode_key: Callable[[bytes], Any],
               decode_value: Callable[[bytes], Any], *, isolation_level: str = "read_committed",
               timeout: float = 60) -> list[OutputRecord]:
    """Every record of ``topic`` up to its end offsets (the last stable offsets under
    read_committed), by partition then offset."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             isolation_level=isolation_level, max_partition_fetch_bytes=4 * 1024 * 1024)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        assert tps, f"output topic {topic!r} does not exist"
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[OutputRecord] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} ({isolation_level}): positions "
                                     f"{ {tp.partition: consumer.position(tp) for tp in tps} } did not reach the "
                                     f"end offsets { {tp.partition: o for tp, o in ends.items()} } in {timeout}s")
            for tp, records in consumer.poll(timeout_ms=500).items():
                out.extend(OutputRecord(decode_key(r.key), None if r.value is None else decode_value(r.value),
                                        r.partition, r.offset) for r in records if r.offset < ends[tp])
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def session_key(raw: bytes) -> SessionKey:
    from airflow_stateful_provider.streams import Serdes, SessionWindowedSerde

    windowed = SessionWindowedSerde(Serdes.string()).deserialize(raw)
    return (windowed.key, windowed.window.start, windowed.window.end)


def payment_key(raw: bytes) -> str:
    return raw.decode()


def json_value(raw: bytes) -> Any:
    return json.loads(raw)


@dataclasses.dataclass
class TopicVerdict:
    """One output topic against the oracle, key by key."""

    topic: str
    expected_keys: int
    records: int
    missing: list[Any] = dataclasses.field(default_factory=list)
    unexpected: list[Any] = dataclasses.field(default_factory=list)
    #: keys seen more than once -> number of records of the key
    duplicated: dict[Any, int] = dataclasses.field(default_factory=dict)
    #: keys whose final value the oracle does not allow
    wrong_final: list[Any] = dataclasses.field(default_factory=list)
    #: keys with any record whose value differs from the oracle's
    wrong_any: list[Any] = dataclasses.field(default_factory=list)
    #: sessions only: keys whose final click count exceeds the oracle's -> excess clicks
    over_counted: dict[Any, int] = dataclasses.field(default_factory=dict)
    seen: dict[Any, list[Any]] = dataclasses.field(default_factory=dict)
    expected: dict[Any, Any] = dataclasses.field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        """Records beyond the first of each key."""
        return sum(n - 1 for n in self.duplicated.values())

    def summary(self) -> str:
        return (f"{self.topic}: {self.records} records for {len(self.seen)} keys ({self.expected_keys} expected); "
                f"missing {len(self.missing)}, unexpected {len(self.unexpected)}, "
                f"duplicate records {self.duplicates} (over {len(self.duplicated)} keys), "
                f"wrong final values {len(self.wrong_final)}, keys with any wrong value {len(self.wrong_any)}"
                + (f", over-counted sessions {len(self.over_counted)} (+{sum(self.over_counted.values())} clicks)"
                   if self.over_counted else ""))

    def to_json(self) -> dict[str, Any]:
        """The problems with every record of each key involved (keys as text)."""
        keys = {*self.missing, *self.unexpected, *self.duplicated, *self.wrong_final, *self.wrong_any}
        return {"topic": self.topic, "summary": self.summary(),
                "missing": [repr(k) for k in self.missing], "unexpected": [repr(k) for k in self.unexpected],
                "wrong_final": [repr(k) for k in self.wrong_final], "wrong_any": [repr(k) for k in self.wrong_any],
                "duplicated": {repr(k): n for k, n in self.duplicated.items()},
                "over_counted": {repr(k): n for k, n in self.over_counted.items()},
                "records": {repr(k): {"expected": self.expected.get(k), "seen": self.seen.get(k, [])}
                            for k in sorted(keys, key=repr)},
                # sessions: every expected and seen session of the users of missing or unexpected keys
                # (a session with other bounds shows up as one missing and one unexpected key)
                "sessions_of_users": {user: {"expected": sorted(repr(k) for k in self.expected if k[0] == user),
                                             "seen": sorted(repr(k) for k in self.seen if k[0] == user)}
                                      for user in sorted({k[0] for k in (*self.missing, *self.unexpected)
                                                          if isinstance(k, tuple)})}}

    def examples(self, keys: Iterable[Any], what: str, limit: int = 5) -> str:
        keys = list(keys)
        if not keys:
            return ""
        lines = [f"  {what} in {self.topic} ({len(keys)} keys), e.g.:"]
        for key in sorted(keys, key=repr)[:limit]:
            lines.append(f"    {key!r}: expected {_short(self.expected.get(key))}, "
                         f"seen {[_short(v) for v in self.seen.get(key, [])]}")
        return "\n".join(lines)


def _short(value: Any) -> Any:
    """Session values shown as their click count and pages; payments as their pricing."""
    if not isinstance(value, dict):
        return value
    if "clicks" in value:
        return {"clicks": value["clicks"], "pages": value.get("pages")}
    return {k: value.get(k) for k in ("amount", "currency", "ts", "rate", "rate_ts", "amount_usd")}


def _session_allowed(expected: dict[str, Any], final: dict[str, Any]) -> bool:
    """At-least-once: the session's window, user and pages exact, its clicks at least the
    oracle's (clicks processed again after a crash are counted again)."""
    return (final is not None and {k: v for k, v in final.items() if k != "clicks"}
            == {k: v for k, v in expected.items() if k != "clicks"} and final["clicks"] >= expected["clicks"])


def compare_outputs(topic: str, expected: dict[Any, Any], records: Sequence[OutputRecord], *,
                    exact: bool, sessions: bool) -> TopicVerdict:
    """Per key: missing, unexpected, duplicated; with ``exact`` every record must equal the
    oracle's value, otherwise (at-least-once) the final value must be one it allows."""
    seen: dict[Any, list[Any]] = defaultdict(list)
    for record in records:
        seen[record.key].append(record.value)
    verdict = TopicVerdict(topic, len(expected), len(records), seen=dict(seen), expected=expected)
    verdict.missing = [k for k in expected if k not in seen]
    verdict.unexpected = [k for k in seen if k not in expected]
    verdict.duplicated = {k: len(v) for k, v in seen.items() if len(v) > 1}
    for key, values in seen.items():
        if key not in expected:
            continue
        want = expected[key]
        if any(v != want for v in values):
            verdict.wrong_any.append(key)
        final = values[-1]
        if final == want:
            continue
        if exact or not sessions or not _session_allowed(want, final):
            verdict.wrong_final.append(key)
        else:
            verdict.over_counted[key] = final["clicks"] - want["clicks"]
    return verdict
