"""The example pipeline under repeated SIGKILLs: nothing lost, and with exactly_once_v2
nothing duplicated either.

Three instance processes of airflow_stateful_provider/examples/clicks_and_payments.py run
40k clicks, 10k payments and the currency rates (examples/generator.py), the clicks and
payments sent in three waves while a seeded schedule kills instances (SIGKILL) and
restarts them on their state directories (tests/integration/crash_harness.py: some
victims are processing input at that moment, some die 0.5-2 s after another kill or
restart, during the rebalance). Once the group has committed every input and repartition
record the instances stop cleanly and both output topics are read ``read_committed`` and
counted key by key against the oracle (examples/expected.py):

- exactly_once_v2: no key missing, none unexpected, one record per key, every value
  exactly the oracle's (session click counts and pages, payment prices);
- at_least_once: no key missing or unexpected, every payment priced right, and the final
  value of every session one the oracle allows: its window and pages exact, its clicks at
  least the oracle's (clicks processed again after a crash are counted again: the known
  at-least-once over-count exactly-once removes). Duplicates and over-counts are printed
  (``-s``) and recorded as properties, not asserted.

Why the oracle holds while tasks move: the engine restores each task's partition time and
the session aggregation's last emitted window-close time from the committed offsets'
metadata, so a new owner (after a clean hand-over, or after a crash under exactly-once,
where the stores come back as of the last commit) continues from the committed state. Its
session processor's own observed stream time starts from the first record it processes,
which can only admit a far-too-late click into a session that is already closed and never
emitted again. After a crash under at-least-once the stores may be ahead of the committed
offsets: the clicks processed again are counted again, but every click lands in the same
session, so the set of sessions stays the oracle's.

Size and time: the oracle needs ``windowed_aggregation_emit_interval_ms=0``, so every click
that advances stream time asks the session store for the sessions that closed (a seek on
its time index, state/session/index.py). The oracle itself grows with the square of the
clicks (several CPU seconds for 40k, in a niced child process meanwhile). Every wait for
work fails on a stall of its progress (committed offsets, restored changelog records, the
oracle's CPU time), not at a deadline, so a busy machine slows the test without failing it.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.integration.crash_harness import (
    App,
    BackgroundOracle,
    Chaos,
    Cluster,
    OffsetWatch,
    Timeline,
    WaveProducer,
    Workload,
    split_input,
    wait_for_app,
    wait_fully_consumed,
    wait_no_open_transactions,
)
from tests.integration.output_verdict import compare_outputs, json_value, payment_key, read_topic, session_key

pytestmark = pytest.mark.kafka

WORKLOAD = Workload(seed=4242, users=600, clicks=40_000, payments=10_000, partitions=4)
INSTANCES = ("instance-0", "instance-1", "instance-2")
#: seconds after the first wave when each wave of clicks and payments is sent
WAVE_DELAYS = (0.0, 6.0, 12.0)
KILL_ROUNDS = 3  # two kills each
CHAOS_SEED = 1789


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_sigkilled_instances_lose_nothing_and_exactly_once_duplicates_nothing(
        guarantee, bootstrap_servers, tmp_path, record_property):
    exact = guarantee == "exactly_once_v2"
    timeline = Timeline()
    app = App(f"crash-{'eos' if exact else 'alos'}-{uuid.uuid4().hex[:8]}", WORKLOAD)
    settings = app.settings
    now_ms = int(time.time() * 1000)
    oracle = BackgroundOracle(WORKLOAD, now_ms)
    rates, waves = split_input(WORKLOAD.records(now_ms), len(WAVE_DELAYS))
    app.create_topics(bootstrap_servers)
    watch = OffsetWatch(bootstrap_servers, app)
    cluster = Cluster(app, bootstrap_servers, tmp_path, INSTANCES, {
        "processing_guarantee": guarantee,
        "commit_interval_ms": 1000,
        "status_interval_ms": 500,
        "num_standby_replicas": 1,
        # the oracle checks for closed sessions after every record, not once a wall-clock second
        "windowed_aggregation_emit_interval_ms": 0,
        "consumer_configs": {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 1_500},
    }, timeline)
    producer = WaveProducer(app, bootstrap_servers, list(zip(WAVE_DELAYS, waves, strict=True)), timeline)
    chaos = Chaos(cluster, watch, CHAOS_SEED, timeline)
    started = time.monotonic()

    def context() -> str:
        return f"timeline:\n{timeline}\n{cluster.logs()}"

    try:
        cluster.start_all()
        # every rate committed before any payment is sent: each payment then finds the rates valid at its time
        sent = app.produce(bootstrap_servers, rates)
        timeline.add(f"rates sent: {sent}")
        # nothing can progress before the instances have started and joined: a longer stall allowed
        wait_for_app(watch, cluster, lambda: cluster.check_running() or not watch.unconsumed(settings.rates_topic),
                     "the instances to commit every rate", context, stall=90)
        timeline.add("every rate committed")

        producer.start()
        wait_for_app(watch, cluster, lambda: cluster.check_running() or
                     watch.committed_total([settings.clicks_topic]) >= 2_000,
                     "the first 2000 clicks committed", context, interval=0.25)
        timeline.add("processing clicks")
        chaos.run(KILL_ROUNDS)
        producer.join_checked(60)
        processing_seconds = wait_fully_consumed(watch, cluster, timeline)
        codes = cluster.stop_all()
        assert all(code == 0 for code in codes.values()), f"unclean stop {codes}\n{context()}"

        wait_no_open_transactions(watch, settings.output_topics, 30)
        sessions = read_topic(bootstrap_servers, settings.sessions_topic, session_key, json_value)
        payments = read_topic(bootstrap_servers, settings.payments_usd_topic, payment_key, json_value)
        # records written but never committed (transactions aborted after a kill); 0 under at-least-once
        aborted = sum(len(read_topic(bootstrap_servers, topic, bytes, bytes, isolation_level="read_uncommitted"))
                      for topic in settings.output_topics) - len(sessions) - len(payments)
        expected = oracle.result()
    finally:
        producer.cancel()
        cluster.ensure_stopped()
        watch.close()
        oracle.close()
    elapsed = time.monotonic() - started

    verdicts = [compare_outputs(settings.sessions_topic, expected.sessions, sessions, exact=exact, sessions=True),
                compare_outputs(settings.payments_usd_topic, expected.payments, payments, exact=exact, sessions=False)]
    report = "\n".join([f"{guarantee}: {cluster.kills} kills ({chaos.processing_kills} of an instance seen "
                        f"processing, {chaos.fallback_kills} fallback), {elapsed:.0f}s in all, "
                        f"{processing_seconds:.0f}s waiting for the last commits after the kills; "
                        f"output records in aborted transactions: {aborted}",
                        *(v.summary() for v in verdicts)])
    print(f"\n{report}\ntimeline:\n{timeline}")
    for verdict in verdicts:
        name = "sessions" if verdict is verdicts[0] else "payments"
        record_property(f"{name}_duplicate_records", verdict.duplicates)
        record_property(f"{name}_over_counted", len(verdict.over_counted))
    record_property("aborted_output_records", aborted)

    assert len(expected.sessions) > 5_000 and len(expected.payments) == WORKLOAD.payments
    assert cluster.kills >= 5, report
    problems = []
    for v in verdicts:
        problems += [v.examples(v.missing, "missing keys"), v.examples(v.unexpected, "keys the oracle does not have")]
        if exact:
            problems.append(v.examples(v.duplicated, "keys written more than once"))
        if exact or v is verdicts[1]:  # a payment is priced right every time it is written, duplicates included
            problems.append(v.examples(v.wrong_any, "keys with a wrong value"))
        else:  # at-least-once sessions: over-counted clicks allowed
            problems.append(v.examples(v.wrong_final, "keys whose final value the oracle does not allow"))
    problems = [p for p in problems if p]
    if problems:
        details = tmp_path / "verdict.json"
        details.write_text(json.dumps({"application_id": app.application_id, "workload": repr(WORKLOAD),
                                       "now_ms": now_ms, "topics": [v.to_json() for v in verdicts]}, indent=1))
        problems.append(f"every key and record seen for the problems above: {details}")
    assert not problems, "\n".join([report, *problems, f"timeline:\n{timeline}", cluster.logs()])
