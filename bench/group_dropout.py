"""Reproduction: does a stream thread drop out of its group when two instances start
together under load? (see docs/runtime.md, "Rebalance details").

One local broker; a backlog of ``--records`` on a 4-partition input topic; then ``--runs``
rounds, each with a fresh application id: two instances (session timeout 6 s, heartbeat
2 s) of tests.integration.topologies:failover_counts started together, watched for
``--watch`` seconds. A round counts as a drop-out when an instance logs "outside its group"
or "commits refused", or when the status topic shows the two instances in different
generations for longer than 10 s. Prints one JSON line per round and a summary.

    .venv/bin/python bench/group_dropout.py [--runs 10] [--records 300000] [--watch 40]
    [--runner MODULE_FILE]   (a wrapper script run instead of the runner, e.g. with extra logging)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run by path (`python bench/x.py`): as a module of the repo
    os.execv(sys.executable, [sys.executable, "-m", f"bench.{Path(__file__).stem}", *sys.argv[1:]])

from airflow_stateful_provider.streams.status.reader import read_status_documents
from tools.instances import REPO_ROOT, InstanceProcess
from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.topics import create_topics, produce

INPUT, OUTPUT = "failover-in", "failover-out"  # the topology's topics
TOPOLOGY = "tests.integration.topologies:failover_counts"
DROP_MARKERS = ("outside its group", "commits refused")


class WrappedInstance(InstanceProcess):
    """An instance run through a wrapper script (same arguments as the runner)."""

    def __init__(self, *args, runner: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.runner = runner

    def start(self) -> InstanceProcess:
        if self.runner is None:
            return super().start()
        config_path = self.work_dir / f"{self.name}.json"
        config_path.write_text(json.dumps(self.config))
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, self.runner, "--topology", self.topology, "--config", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
        return self


def produce_input(bootstrap: str, records: int) -> None:
    produce(bootstrap, INPUT, ((b"k%05d" % (i % 10_000), b"{}") for i in range(records)), linger_ms=50,
            batch_size=512 * 1024, acks=1)


def one_round(bootstrap: str, work: Path, watch: float, runner: str | None) -> dict:
    app = f"dropout-{uuid.uuid4().hex[:8]}"
    instances = []
    for name in ("instance-0", "instance-1"):
        config = {"application_id": app, "bootstrap_servers": bootstrap, "state_dir": str(work / app / name),
                  "instance_id": name, "commit_interval_ms": 1_000, "status_interval_ms": 500,
                  "num_standby_replicas": 0,
                  "consumer_configs": {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 2_000},
                  "app_configs": {"input": INPUT, "output": OUTPUT}}
        (work / app).mkdir(parents=True, exist_ok=True)
        instances.append(WrappedInstance(TOPOLOGY, config, work / app, name, runner=runner))
    for instance in instances:
        instance.start()
    started = time.monotonic()
    differing_since = None
    result = {"app": app, "dropped": False, "why": None}
    try:
        while time.monotonic() - started < watch:
            time.sleep(1)
            for instance in instances:
                text = instance.log_path.read_text(errors="replace") if instance.log_path.exists() else ""
                if any(marker in text for marker in DROP_MARKERS):
                    result.update(dropped=True, why=f"{instance.name} log", at=round(time.monotonic() - started, 1))
            if result["dropped"]:
                break
            try:
                generations = {n: d.generation for n, d in read_status_documents(bootstrap, app).items()}
            except Exception:  # noqa: BLE001 - nothing published yet
                continue
            if len(generations) == 2 and len(set(generations.values())) > 1:
                differing_since = differing_since or time.monotonic()
                if time.monotonic() - differing_since > 10:
                    result.update(dropped=True, why=f"generations {generations}",
                                  at=round(time.monotonic() - started, 1))
                    break
            else:
                differing_since = None
    finally:
        for instance in instances:
            try:
                instance.stop(timeout=30)
            except Exception:  # noqa: BLE001
                instance.ensure_stopped()
    result["logs"] = str(work / app)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--watch", type=float, default=40)
    parser.add_argument("--runner", help="wrapper script to run instead of the runner module")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one (topics must exist)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="group-dropout-"))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = LocalKafkaBroker(work / "broker").start()
        bootstrap = broker.bootstrap_servers
        create_topics(bootstrap, {INPUT: 4, OUTPUT: 4})
        produce_input(bootstrap, args.records)
    print(f"broker {bootstrap}, work dir {work}", flush=True)
    drops = 0
    try:
        for run in range(args.runs):
            result = one_round(bootstrap, work, args.watch, args.runner)
            drops += result["dropped"]
            print(json.dumps({"run": run, **result}), flush=True)
    finally:
        if broker is not None:
            broker.stop()
    print(json.dumps({"runs": args.runs, "drop_outs": drops}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
