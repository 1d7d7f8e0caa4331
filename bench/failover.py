"""Benchmark: failover time of a stateful task, without and with a standby replica (issue 5).

1M input records over 1M keys are counted into a RocksDB key-value store by two instances
(separate OS processes, the runner) of an application with 4 tasks, so each task's changelog
holds ~250k records. Then, with a steady input flow, the instance owning task 0_0 (read from
the status topic) gets SIGKILL, and we measure the time from the SIGKILL to the first record
task 0_0 processed on the surviving instance. Run twice, in this order, against the same
input: num_standby_replicas=0 (the survivor must restore the whole changelog partition) and
=1 (the survivor's standby, caught up before the kill, is promoted and restores only the
remainder). Each round is a fresh application id with fresh state directories.

"First record processed" is exact: the topology (bench/topologies.py:marked_counts) writes into
every output value the instance id, the task id and the wall-clock time at which the processor
handled the record. A consumer reads the output topic from the offsets it had just before the
kill and takes the first value with task 0_0, instance = survivor; its "at" minus the kill time
(both on this host's clock) is the failover time. Detection of the dead member by the group
coordinator (session timeout), the rebalance, the restoration and the first poll are all in it.

Prints progress, then as its last line one JSON object:
  session_timeout_ms, failover_s_no_standby, failover_s_one_standby,
  ratio_without_over_with, records_of_state, machine (plus details of each round)

    python bench/failover.py [--records 1000000] [--keys 1000000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from airflow_stateful_provider.streams.status.reader import fetch_application_status, read_status_documents
from bench.topologies import (
    STORE,
    OffsetReader,
    SteadyProducer,
    machine,
    produce_keys,
)
from tools.instances import InstanceProcess
from tools.kafka.broker import LocalKafkaBroker
from tools.waits import wait_until

PARTITIONS = 4
TASK = "0_0"
SESSION_TIMEOUT_MS = 6_000  # the broker's group.min.session.timeout.ms
#: Kafka's advice (and the Java default ratio): a third of the session timeout.
HEARTBEAT_INTERVAL_MS = 2_000
INPUT, OUTPUT = "bench-failover-in", "bench-failover-out"


def instance_config(app: str, bootstrap: str, work: Path, name: str, standbys: int) -> dict:
    return {"application_id": app, "bootstrap_servers": bootstrap, "state_dir": str(work / name),
            "instance_id": name, "commit_interval_ms": 1_000, "status_interval_ms": 500,
            "num_standby_replicas": standbys,
            "consumer_configs": {"session_timeout_ms": SESSION_TIMEOUT_MS,
                                 "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS},
            "app_configs": {"input": INPUT, "output": OUTPUT}}


def status_or_none(bootstrap: str, app: str, **kwargs):
    try:
        return fetch_application_status(bootstrap, app, **kwargs)
    except Exception:  # noqa: BLE001 - nothing published yet, or a transient read error
        return None


class WedgedGroup(RuntimeError):
    """An instance fell out of the consumer group but keeps running its old tasks: its
    consumer lost a JoinGroup/SyncGroup result (seen with kafka-python 3.0.12 when the
    stream thread's rebalance poll times out while the broker still holds the JoinGroup),
    stops heartbeating, is evicted, and never rejoins. Its status document stays RUNNING
    with an old generation. The round is retried once with a fresh application."""


def generations(bootstrap: str, app: str) -> dict[str, int | None]:
    try:
        return {name: d.generation for name, d in read_status_documents(bootstrap, app).items()}
    except Exception:  # noqa: BLE001 - nothing published yet, or a transient read error
        return {}


def wait_ready(bootstrap: str, app: str, instances: dict[str, InstanceProcess], standbys: int,
               timeout: float = 120, wedged_after: float = 20) -> float:
    """Wait for ``ready``; raise WedgedGroup when the instances report different group
    generations for ``wedged_after`` seconds (a rebalance takes a few seconds, and the
    session timeout evicts a silent member after 6)."""
    started = time.monotonic()
    differing_since: float | None = None
    while not ready(bootstrap, app, instances, standbys):
        now = time.monotonic()
        seen = generations(bootstrap, app)
        if len(set(seen.values())) > 1:
            differing_since = differing_since or now
            if now - differing_since > wedged_after:
                raise WedgedGroup(f"generations {seen} for {now - differing_since:.0f}s:\n{group_view(bootstrap, app)}")
        else:
            differing_since = None
        if now - started > timeout:
            raise RuntimeError(f"timed out after {timeout}s waiting for both instances in one generation, every task "
                               f"running on exactly one{' with a caught-up standby' if standbys else ''}\n"
                               f"{group_view(bootstrap, app)}\n{instances['instance-0'].log_tail(15)}\n"
                               f"{instances['instance-1'].log_tail(15)}")
        time.sleep(0.5)
    return time.monotonic() - started


def group_view(bootstrap: str, app: str) -> str:
    """One line per instance document: state, generation, tasks by role (for error messages)."""
    try:
        documents = read_status_documents(bootstrap, app)
    except Exception as exc:  # noqa: BLE001
        return f"(no status: {exc})"
    return "\n".join(f"{name}: {d.state}, generation {d.generation}, "
                     + ", ".join(f"{t.task_id} {t.role} {t.state}" for t in d.tasks) for name, d in documents.items())


def ready(bootstrap: str, app: str, instances: dict[str, InstanceProcess], standbys: int) -> bool:
    """Both instances RUNNING in the same generation, each task active on exactly one of
    them, both holding actives, and (standbys=1) each task with a standby on the other
    instance at lag 0 against the live changelog end. The generation check matters: an
    instance that dropped out of the group can keep publishing (and processing) its old
    tasks, and must not be taken for a member."""
    for instance in instances.values():
        instance.check_alive()
    try:
        documents = read_status_documents(bootstrap, app)
    except Exception:  # noqa: BLE001 - nothing published yet, or a transient read error
        return False
    if set(documents) != set(instances) or any(d.state != "RUNNING" for d in documents.values()):
        return False
    generations = {d.generation for d in documents.values()}
    if len(generations) != 1 or None in generations:
        return False
    actives = sorted(t.task_id for d in documents.values() for t in d.tasks if t.role == "active")
    if actives != [f"0_{p}" for p in range(PARTITIONS)] or \
            any(not any(t.role == "active" for t in d.tasks) for d in documents.values()):
        return False
    status = status_or_none(bootstrap, app)
    if status is None or any(t.state != "running" for t in status.tasks):
        return False
    if standbys:
        return all(len(t.standbys) == 1 and not t.standbys[0].warmup and t.standbys[0].lag == 0
                   and t.standbys[0].instance_id != t.active.instance_id for t in status.tasks)
    return all(not t.standbys for t in status.tasks)


def first_record_by(consumer: KafkaConsumer, survivor: str, after_ms: int, timeout: float) -> dict:
    """The first output value of TASK processed by ``survivor`` at or after ``after_ms``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=200).values():
            for record in batch:
                value = json.loads(record.value)
                if value["task"] == TASK and value["by"] == survivor and value["at"] >= after_ms:
                    return value
    raise RuntimeError(f"no record of {TASK} processed by {survivor} within {timeout}s of the kill")


def run_round(bootstrap: str, work: Path, standbys: int, keys: int, rate: int, attempt: int = 1) -> dict:
    app = f"bench-failover-s{standbys}" + (f"-attempt{attempt}" if attempt > 1 else "")
    print(f"--- num_standby_replicas={standbys} (application {app})", flush=True)
    round_dir = work / app
    round_dir.mkdir()
    instances = {name: InstanceProcess("bench.topologies:marked_counts",
                                       instance_config(app, bootstrap, round_dir, name, standbys), round_dir, name)
                 for name in ("instance-0", "instance-1")}
    offsets = OffsetReader(bootstrap)
    producer: SteadyProducer | None = None
    output: KafkaConsumer | None = None
    try:
        started = time.monotonic()
        for instance in instances.values():
            instance.start()
        ends = offsets.ends(INPUT)
        wait_until(lambda: all(i.check_alive() is None for i in instances.values())
                   and offsets.committed(app, INPUT) == ends, 900,
                   f"the {sum(ends.values())} input records to be processed",
                   lambda: instances["instance-0"].log_tail(15) + "\n" + instances["instance-1"].log_tail(15))
        print(f"processed {sum(ends.values())} input records in {time.monotonic() - started:.1f}s", flush=True)
        waited = wait_ready(bootstrap, app, instances, standbys)
        print(f"ready {waited:.1f}s later", flush=True)

        producer = SteadyProducer(bootstrap, INPUT, rate, keys)
        producer.start()
        time.sleep(5)  # steady state: the flow is processed, standbys follow it
        status = fetch_application_status(bootstrap, app)
        owner = status.task(TASK).active.instance_id
        survivor = next(name for name in instances if name != owner)
        standby_lag = status.task(TASK).standbys[0].lag if standbys else None
        documents = read_status_documents(bootstrap, app)
        changelog = f"{app}-{STORE}-changelog"
        standby_position = next((c.current_offset for t in documents[survivor].tasks if t.task_id == TASK
                                 for c in t.changelogs if c.topic == changelog), 0)

        output = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=5_000)
        tps = [TopicPartition(OUTPUT, p) for p in range(PARTITIONS)]
        output.assign(tps)
        for tp, end in output.end_offsets(tps).items():
            output.seek(tp, end)
        print(f"{TASK} is active on {owner}; SIGKILL it ({survivor} survives"
              + (f", standby lag {standby_lag}" if standbys else "") + ")", flush=True)
        killed_ms = time.time_ns() // 1_000_000
        instances[owner].kill()
        changelog_end = offsets.ends(changelog)[0]
        try:
            first = first_record_by(output, survivor, killed_ms, timeout=180)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{group_view(bootstrap, app)}\n{instances[survivor].log_tail(30)}") from None
        failover_s = (first["at"] - killed_ms) / 1000
        print(f"first record of {TASK} processed by {survivor} {failover_s:.2f}s after the SIGKILL "
              f"(its key's count: {first['n']})", flush=True)
        if first["n"] < 2:  # every steady-flow key was counted once by the load: the state was lost
            print(f"WARNING: count {first['n']} after the failover: {TASK}'s state did not survive", flush=True)

        events = [e for e in instances[survivor].events()
                  if e["topic"] == changelog and e["partition"] == 0 and e["at_ms"] >= killed_ms]
        promoted = next((e for e in events if e["event"] == "standby_suspended" and e["reason"] == "promoted"), None)
        promoted_s = (promoted["at_ms"] - killed_ms) / 1000 if promoted else None
        restore_start = next((e for e in events if e["event"] == "restore_start"), None)
        restore_end = next((e for e in events if e["event"] == "restore_end"), None)
        restored = restore_end["total"] if restore_end else 0
        restore_s = (restore_end["at_ms"] - restore_start["at_ms"]) / 1000 if restore_start and restore_end else None
        assigned_s = (restore_start["at_ms"] - killed_ms) / 1000 if restore_start else None
        if promoted:
            print(f"  standby of {TASK} on {survivor} promoted {promoted_s:.2f}s after the kill at changelog offset "
                  f"{promoted['store_offset']} (end {promoted['end_offset']}); restored {restored} records", flush=True)
        else:
            print(f"  restoration of {TASK} on {survivor}: started {assigned_s}s after the kill, "
                  f"{restored} records in {restore_s}s (changelog end at the kill: {changelog_end}, "
                  f"standby position: {standby_position})", flush=True)
        return {"failover_s": round(failover_s, 3), "first_record_count": first["n"],
                "promoted_after_kill_s": promoted_s, "restored_records": restored,
                "restore_started_after_kill_s": assigned_s, "restore_s": restore_s,
                "changelog_end_at_kill": changelog_end, "standby_lag_at_kill": standby_lag}
    finally:
        if producer is not None:
            producer.stop()
        if output is not None:
            output.close()
        offsets.close()
        for instance in instances.values():
            instance.stop(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="input records loaded before the kill")
    parser.add_argument("--keys", type=int, default=1_000_000, help="distinct keys (the store holds this many)")
    parser.add_argument("--rate", type=int, default=1_000, help="steady input records/s around the kill")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, broker, state)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    print(f"work directory {work}", flush=True)
    with LocalKafkaBroker(work / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(INPUT, PARTITIONS, 1), NewTopic(OUTPUT, PARTITIONS, 1)])
        admin.close()
        t0 = time.monotonic()
        produce_keys(bootstrap, INPUT, args.records, args.keys)
        print(f"produced {args.records} records over {args.keys} keys in {time.monotonic() - t0:.1f}s", flush=True)
        rounds: dict[int, dict] = {}
        wedged: list[str] = []
        for standbys in (0, 1):
            for attempt in (1, 2):
                try:
                    rounds[standbys] = run_round(bootstrap, work, standbys, args.keys, args.rate, attempt)
                    break
                except WedgedGroup as exc:
                    print(f"WARNING: num_standby_replicas={standbys}: an instance dropped out of the group and "
                          f"kept running its old tasks; {'retrying' if attempt == 1 else 'giving up'}\n{exc}",
                          flush=True)
                    wedged.append(f"num_standby_replicas={standbys} attempt {attempt}")
                    if attempt == 2:
                        raise

    without, with_ = rounds[0]["failover_s"], rounds[1]["failover_s"]
    target = SESSION_TIMEOUT_MS / 1000 + 2
    print(f"session timeout {SESSION_TIMEOUT_MS} ms (heartbeat {HEARTBEAT_INTERVAL_MS} ms); failover without a "
          f"standby {without:.2f}s, with one {with_:.2f}s (target <= {target:.0f}s: "
          f"{'met' if with_ <= target else 'MISSED'}); ratio {without / with_:.1f}")
    result = {"session_timeout_ms": SESSION_TIMEOUT_MS, "failover_s_no_standby": without,
              "failover_s_one_standby": with_, "ratio_without_over_with": round(without / with_, 2),
              "records_of_state": args.records, "keys": args.keys, "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
              "input_rate_per_s": args.rate, "no_standby": rounds[0], "one_standby": rounds[1],
              "wedged_group_retries": wedged, "machine": machine()}
    if not args.keep and not wedged:  # ~260 MB; kept (with the instance logs) when something went wrong
        shutil.rmtree(work, ignore_errors=True)
    elif wedged:
        print(f"work directory (instance logs of the wedged attempts) kept: {work}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
