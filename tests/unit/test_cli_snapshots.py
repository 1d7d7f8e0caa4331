"""``stateful-streams snapshots``: list an application's snapshots on a file:// location
(with the problems a restore would skip them for) and delete all but the newest K."""

from __future__ import annotations

import io
import json
import os

from airflow_stateful_provider.cli import main
from airflow_stateful_provider.streams.snapshots.manifest import MANIFEST_FILE_NAME
from airflow_stateful_provider.streams.snapshots.storage import SnapshotStorage
from tests.unit.streams.snapshots.two_tasks import take_snapshots


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def snapshots(tmp_path, count: int) -> tuple[str, SnapshotStorage]:
    storage = take_snapshots(tmp_path, count, keep=10)
    return storage.url, storage


def test_list_shows_every_snapshot_and_what_is_wrong_with_one(tmp_path):
    url, storage = snapshots(tmp_path, 3)
    newest = storage.list_snapshots("app", "0_1")[0]
    with open(os.path.join(storage.snapshot_path("app", "0_1", newest.snapshot_id), MANIFEST_FILE_NAME), "w") as f:
        f.write("{")
    code, out = run("snapshots", "list", url, "app")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TASK", "SNAPSHOT", "AGE", "SIZE", "OFFSETS", "PROBLEM"]
    assert [line.split()[0] for line in lines[1:]] == ["0_0"] * 3 + ["0_1"] * 3
    assert "counts@2" in lines[1] and "counts@0" in lines[3]
    assert newest.snapshot_id in lines[4] and "manifest is not valid JSON" in lines[4]

    code, out = run("snapshots", "list", url, "app", "--task", "0_0", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["offsets"] for r in rows] == [{"counts": 2}, {"counts": 1}, {"counts": 0}]
    assert all(r["problem"] is None and r["total_bytes"] > 0 for r in rows)


def test_delete_keeps_the_newest_k_of_each_task(tmp_path):
    url, storage = snapshots(tmp_path, 4)
    before = {t: [s.snapshot_id for s in storage.list_snapshots("app", t)] for t in ("0_0", "0_1")}
    code, out = run("snapshots", "delete", url, "app", "--keep", "1")  # a plan, as Kafka's --reset-offsets
    assert code == 0 and out.splitlines()[-2:] == ["would delete 6 snapshot(s); kept the newest 1 of each task",
                                                   "nothing deleted yet: run again with --execute to delete them"]
    assert sorted(line.split()[2] for line in out.splitlines()[:-2]) == \
        sorted(f"{t}/{i}" for t, ids in before.items() for i in ids[1:])
    assert {t: [s.snapshot_id for s in storage.list_snapshots("app", t)] for t in ("0_0", "0_1")} == before
    code, out = run("snapshots", "delete", url, "app", "--keep", "1", "--json", "--execute")
    assert code == 0 and json.loads(out)["executed"] is True and len(json.loads(out)["deleted"]) == 6
    assert {t: [s.snapshot_id for s in storage.list_snapshots("app", t)] for t in ("0_0", "0_1")} == \
        {t: ids[:1] for t, ids in before.items()}


def test_bad_storage_options_and_keep_are_refused(tmp_path, capsys):
    (tmp_path / "options.json").write_text("[1]")
    code, _ = run("snapshots", "list", "file:///nowhere", "app", "--storage-options", str(tmp_path / "options.json"))
    assert code == 2 and "must hold a JSON object" in capsys.readouterr().err
    try:
        run("snapshots", "delete", "file:///nowhere", "app", "--keep", "0")
    except SystemExit as exc:
        assert exc.code == 2
    assert "--keep takes a number >= 1, got 0" in capsys.readouterr().err
