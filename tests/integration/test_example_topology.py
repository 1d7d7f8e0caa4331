"""The example pipeline (airflow_stateful_provider/examples) on a real broker: two instance
processes with standbys; the output topics must equal the oracle exactly."""

from __future__ import annotations

import uuid

import pytest

from airflow_stateful_provider.examples.clicks_and_payments import JOIN_NAME, ExampleSettings
from airflow_stateful_provider.examples.expected import expected_payments_usd, expected_sessions, read_outputs
from airflow_stateful_provider.examples.generator import RATE, ensure_topics, generate, produce
from airflow_stateful_provider.streams.status.reader import fetch_application_status
from tools.instances import InstanceProcess
from tools.kafka.topics import committed_offsets, end_offsets
from tools.waits import COMMITTED_AND_RESTORED, wait_progressing, wait_until

pytestmark = pytest.mark.kafka

TOPOLOGY = "airflow_stateful_provider.examples.clicks_and_payments:build_topology"
PARTITIONS = 4


def test_two_instances_output_exactly_the_oracle(bootstrap_servers, tmp_path):
    app = f"example-{uuid.uuid4().hex[:8]}"
    settings = ExampleSettings(clicks_topic=f"{app}-clicks", payments_topic=f"{app}-payments",
                               rates_topic=f"{app}-rates", sessions_topic=f"{app}-sessions",
                               payments_usd_topic=f"{app}-payments-usd")
    app_configs = {name: getattr(settings, name) for name in
                   ("clicks_topic", "payments_topic", "rates_topic", "sessions_topic", "payments_usd_topic")}
    ensure_topics(bootstrap_servers, settings.input_topics + settings.output_topics, PARTITIONS)
    records = generate(seed=21, users=60, clicks=2000, payments=400)  # recent event times (default start)
    rates = [r for r in records if r.kind == RATE]
    instances = [
        InstanceProcess(TOPOLOGY, {
            "application_id": app, "bootstrap_servers": bootstrap_servers, "state_dir": str(tmp_path / name),
            "instance_id": name, "commit_interval_ms": 100, "status_interval_ms": 200, "num_standby_replicas": 1,
            # exact comparison: check for closed sessions after every record, not once a wall-clock second
            "windowed_aggregation_emit_interval_ms": 0,
            "consumer_configs": {"session_timeout_ms": 6_000}, "app_configs": app_configs,
        }, tmp_path, name)
        for name in ("instance-0", "instance-1")]

    def logs() -> str:
        return "\n".join(f"--- {i.name}\n{i.log_tail(25)}" for i in instances)

    def committed_and_restored() -> int:
        """Progress: offsets committed on the topics the group reads, changelog records restored."""
        topics = (*settings.input_topics, f"{app}-{JOIN_NAME}-left-repartition")
        return (sum(sum(committed_offsets(bootstrap_servers, app, topic).values()) for topic in topics)
                + sum(instance.restored_records() for instance in instances))

    def caught_up(*topics: str) -> bool:
        for instance in instances:
            instance.check_alive()
        for topic in topics:  # an empty partition has no committed offset
            committed = committed_offsets(bootstrap_servers, app, topic)
            if any(committed.get(p, 0) < end for p, end in end_offsets(bootstrap_servers, topic).items()):
                return False
        return True

    try:
        for instance in instances:
            instance.start()

        def settled() -> bool:
            for instance in instances:
                instance.check_alive()
            try:
                status = fetch_application_status(bootstrap_servers, app)
            except Exception:  # noqa: BLE001 - nothing published yet
                return False
            # 3 subtopologies x 4 partitions; the two stateful ones have a standby on the other instance
            return (len(status.tasks) == 3 * PARTITIONS
                    and all(t.active is not None and t.state == "running" for t in status.tasks)
                    and {t.active.instance_id for t in status.tasks} == {"instance-0", "instance-1"}
                    and sum(1 for t in status.tasks if len(t.standbys) == 1
                            and t.standbys[0].instance_id != t.active.instance_id) == 2 * PARTITIONS)
        wait_until(settled, 40, "12 running tasks over both instances, 8 with a standby", logs, interval=0.5)

        # rates first and committed: every payment then finds the rates valid at its time
        produce(bootstrap_servers, rates, rates_topic=settings.rates_topic, partitions=PARTITIONS)
        wait_progressing(lambda: caught_up(settings.rates_topic), committed_and_restored, "the rates committed",
                         measure=COMMITTED_AND_RESTORED, context=logs, interval=0.5)
        produce(bootstrap_servers, [r for r in records if r.kind != RATE], clicks_topic=settings.clicks_topic,
                payments_topic=settings.payments_topic, partitions=PARTITIONS)
        repartition = f"{app}-{JOIN_NAME}-left-repartition"
        wait_progressing(lambda: caught_up(settings.clicks_topic, settings.payments_topic, repartition),
                         committed_and_restored, "clicks, payments and re-keyed payments committed",
                         measure=COMMITTED_AND_RESTORED, context=logs, interval=0.5)
        outputs = read_outputs(bootstrap_servers, sessions_topic=settings.sessions_topic,
                               payments_usd_topic=settings.payments_usd_topic)
        for instance in instances:
            assert instance.stop() == 0, instance.log_tail()
    finally:
        for instance in instances:
            instance.ensure_stopped()

    expected = expected_sessions(records, partitions=PARTITIONS)
    assert len(expected) > 300
    assert outputs.sessions == expected
    assert outputs.payments_usd == expected_payments_usd(records, partitions=PARTITIONS)
