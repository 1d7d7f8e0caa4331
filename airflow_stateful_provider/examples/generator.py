"""Input data for the example pipeline: deterministic by seed, and a producer/CLI for a broker.

``generate()`` returns the records in send order: every currency rate first (sorted by
time, so payments find the rates valid at their time), then clicks and payments by send
time. The data set deliberately holds the cases the topology must get right:

- clicks sent out of order by up to the grace period (accepted, merged into their session)
  and clicks sent far too late (gap + grace or more behind: usually dropped as late);
- payments before the first rate of their currency (priced with a null rate) and rate
  changes between payments (each priced with the rate valid at its own time);
- a final "flush" click per user, gap + grace after the last click, so stream time passes
  the end of every real session and on-window-close emits them all. The flush clicks open
  sessions of their own that stay open (never emitted).

    python -m airflow_stateful_provider.examples.generator --bootstrap-servers localhost:9092 \
        [--seed N] [--users N] [--clicks N] [--payments N] [--partitions N]

creates the input and output topics if missing, sends the records and prints a JSON summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_stateful_provider.examples.clicks_and_payments import (
    CLICKS_TOPIC,
    DEFAULT_SESSION_GAP_MS,
    DEFAULT_SESSION_GRACE_MS,
    PAYMENTS_TOPIC,
    PAYMENTS_USD_TOPIC,
    RATES_TOPIC,
    SESSIONS_TOPIC,
)

__all__ = ["CLICK", "PAYMENT", "RATE", "GeneratedRecord", "ensure_topics", "generate", "main", "produce"]

CLICK, PAYMENT, RATE = "click", "payment", "rate"
DEFAULT_CURRENCIES = ("EUR", "GBP", "JPY", "CHF")
PAGES = ("/home", "/search", "/product", "/cart", "/checkout", "/account", "/help")
_BASE_RATES = {"EUR": 1.08, "GBP": 1.27, "JPY": 0.0067, "CHF": 1.12, "USD": 1.0}
#: Kafka 4 brokers reject timestamps more than an hour ahead (message.timestamp.after.max.ms)
#: and delete records older than their time retention (7 days by default).
_MAX_FUTURE_MS = 50 * 60_000
_MAX_AGE_MS = 6 * 24 * 3_600_000


@dataclasses.dataclass(frozen=True)
class GeneratedRecord:
    """One input record: ``kind`` is CLICK, PAYMENT or RATE; ``timestamp`` is the event time."""

    kind: str
    key: str
    value: dict[str, Any]
    timestamp: int


def generate(
    seed: int = 0,
    users: int = 100,
    clicks: int = 3000,
    payments: int = 600,
    currencies: Sequence[str] = DEFAULT_CURRENCIES,
    start_ms: int | None = None,
    *,
    session_gap_ms: int = DEFAULT_SESSION_GAP_MS,
    session_grace_ms: int = DEFAULT_SESSION_GRACE_MS,
    now_ms: int | None = None,
) -> list[GeneratedRecord]:
    """The records in send order (see module docstring); equal arguments, equal records.

    ``start_ms`` None: the data is placed to end 30 minutes before now (``now_ms``, default
    the clock), on a whole minute, recent enough for the broker's time retention and not in
    the future (Kafka 4 rejects timestamps more than an hour ahead). The data spans several
    hours (about 8 with the defaults: the longest user timeline decides).
    """
    for name, value, minimum in (("users", users, 1), ("clicks", clicks, 0), ("payments", payments, 0),
                                 ("session_gap_ms", session_gap_ms, 1), ("session_grace_ms", session_grace_ms, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if not currencies or len(set(currencies)) != len(currencies):
        raise ValueError(f"currencies must be distinct codes, at least one, got {list(currencies)!r}")
    if start_ms is None:  # the same data shifted: offsets from the start do not depend on it
        now = int(time.time() * 1000) if now_ms is None else now_ms
        span = max(r.timestamp for r in generate(seed, users, clicks, payments, currencies, 0,
                                                 session_gap_ms=session_gap_ms, session_grace_ms=session_grace_ms))
        start_ms = (now - 30 * 60_000 - span) // 60_000 * 60_000
    start = start_ms
    if start < 0:
        raise ValueError(f"start_ms must be >= 0, got {start}")
    rng = random.Random(seed)
    gap, grace = session_gap_ms, session_grace_ms
    user_ids = [f"user-{i:03d}" for i in range(users)]

    # clicks: per user, sessions of 1-12 clicks (gaps within a session up to gap / 6),
    # separated by pauses longer than the gap
    per_user = [0] * users
    for _ in range(clicks):
        per_user[rng.randrange(users)] += 1
    timed: list[tuple[int, int, GeneratedRecord]] = []  # (send time, sequence, record)
    for user, count in zip(user_ids, per_user, strict=True):
        t = start + rng.randrange(gap)
        while count:
            for _ in range(min(count, rng.randint(1, 12))):
                timed.append((t, len(timed), _click(user, rng.choice(PAGES), t)))
                t += rng.randint(5_000, max(5_000, gap // 6))
                count -= 1
            t += gap + rng.randint(60_000, max(60_000, gap // 2))
    last_click = max((r.timestamp for _, _, r in timed), default=start)
    # out of order: 4 % by up to the grace period, 2 % by gap + grace and more
    for i, (send, seq, record) in enumerate(timed):
        draw = rng.random()
        if draw < 0.04:
            timed[i] = (send + rng.randint(1_000, max(1_000, grace)), seq, record)
        elif draw < 0.06:
            timed[i] = (send + rng.randint(gap + grace + 60_000, 2 * (gap + grace) + 60_000), seq, record)
    flush = last_click + gap + grace + 1
    timed.extend((flush, len(timed) + i, _click(user, "/home", flush)) for i, user in enumerate(user_ids))

    # rates: currency j starts j * 20 min after the data start (payments before it get no
    # rate), then changes every 5-30 minutes by up to 0.3 %
    rates: list[GeneratedRecord] = []
    for j, currency in enumerate(currencies):
        rate = _BASE_RATES.get(currency, round(0.5 + rng.random(), 4))
        t = start - 60_000 + j * 20 * 60_000
        while t <= last_click:
            rates.append(_rate(currency, rate, t))
            rate = round(rate * (1 + rng.uniform(-0.003, 0.003)), 6)
            t += rng.randint(5 * 60_000, 30 * 60_000)
    for i in range(payments):
        ts = rng.randint(start, last_click)
        user = rng.choice(user_ids)
        payment = {"payment_id": f"pay-{i:06d}", "user": user, "amount": round(rng.uniform(1, 500), 2),
                   "currency": rng.choice(list(currencies)), "ts": ts}
        timed.append((ts, len(timed), GeneratedRecord(PAYMENT, user, payment, ts)))
    if payments:  # a rate change at exactly a payment's time: that payment gets the new rate
        ts, _, exact = timed[-1]
        currency = exact.value["currency"]
        latest = max((r for r in rates if r.key == currency and r.timestamp < ts), key=lambda r: r.timestamp,
                     default=None)
        if latest is not None:
            rates.append(_rate(currency, round(latest.value["rate_to_usd"] * 1.01, 6), ts))
    rates.sort(key=lambda r: r.timestamp)
    timed.sort(key=lambda item: (item[0], item[1]))
    return rates + [record for _, _, record in timed]


def _click(user: str, page: str, ts: int) -> GeneratedRecord:
    return GeneratedRecord(CLICK, user, {"user": user, "page": page, "ts": ts}, ts)


def _rate(currency: str, rate: float, ts: int) -> GeneratedRecord:
    return GeneratedRecord(RATE, currency, {"currency": currency, "rate_to_usd": rate, "ts": ts}, ts)


def ensure_topics(bootstrap_servers: str, topics: Iterable[str], partitions: int = 4,
                  client_configs: Mapping[str, Any] | None = None) -> None:
    """Create the topics that do not exist yet with ``partitions`` partitions (replication 1);
    an existing topic with another partition count is an error (the example's input topics
    must be co-partitioned)."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    names = list(dict.fromkeys(topics))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, **dict(client_configs or {}))
    try:
        for name in names:
            try:
                admin.create_topics([NewTopic(name, partitions, 1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()
    # metadata only: no group, nothing to commit
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False,
                             **dict(client_configs or {}))
    try:
        deadline = time.monotonic() + 30
        for name in names:
            found = consumer.partitions_for_topic(name)
            while not found and time.monotonic() < deadline:
                time.sleep(0.2)
                consumer.topics()  # refresh metadata
                found = consumer.partitions_for_topic(name)
            if not found:
                raise RuntimeError(f"topic {name!r} was created but the broker did not report it within 30 s")
            if len(found) != partitions:
                raise ValueError(f"topic {name!r} exists with {len(found)} partitions, expected {partitions}")
    finally:
        consumer.close()


def produce(
    bootstrap_servers: str,
    records: Sequence[GeneratedRecord],
    *,
    clicks_topic: str = CLICKS_TOPIC,
    payments_topic: str = PAYMENTS_TOPIC,
    rates_topic: str = RATES_TOPIC,
    partitions: int = 4,
    client_configs: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
) -> dict[str, int]:
    """Create the three input topics if missing (``partitions`` each, co-partitioned), then
    send ``records`` in order with the record timestamp = event time, keys partitioned by
    Kafka's default partitioner. Returns the count sent per topic."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for record in records:
        if not now - _MAX_AGE_MS <= record.timestamp <= now + _MAX_FUTURE_MS:
            raise ValueError(
                f"record timestamp {record.timestamp} of {record.kind} {record.value!r} is not within 6 days before "
                f"and 50 minutes after now ({now}): the broker would delete or reject it; generate with "
                f"start_ms=None (data ending 30 minutes ago)")
    topic_of = {CLICK: clicks_topic, PAYMENT: payments_topic, RATE: rates_topic}
    unknown = {r.kind for r in records} - set(topic_of)
    if unknown:
        raise ValueError(f"unknown record kinds {sorted(unknown)}; expected {sorted(topic_of)}")
    ensure_topics(bootstrap_servers, topic_of.values(), partitions, client_configs)

    from kafka import KafkaProducer

    # one request in flight per connection keeps each partition in send order even on retries
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=20,
                             max_in_flight_requests_per_connection=1, **dict(client_configs or {}))
    sent = {topic: 0 for topic in topic_of.values()}
    try:
        for record in records:
            topic = topic_of[record.kind]
            producer.send(topic, key=record.key.encode(), value=json.dumps(record.value).encode(),
                          timestamp_ms=record.timestamp)
            sent[topic] += 1
        producer.flush()
    finally:
        producer.close()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_stateful_provider.examples.generator",
                                     description="Send generated clicks, payments and rates to Kafka.")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--clicks", type=int, default=3000)
    parser.add_argument("--payments", type=int, default=600)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    try:
        records = generate(args.seed, args.users, args.clicks, args.payments)
        sent = produce(args.bootstrap_servers, records, partitions=args.partitions)
        ensure_topics(args.bootstrap_servers, (SESSIONS_TOPIC, PAYMENTS_USD_TOPIC), args.partitions)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"sent": sent, "partitions": args.partitions, "seed": args.seed,
                      "start_ms": min(r.timestamp for r in records),
                      "end_ms": max(r.timestamp for r in records)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
