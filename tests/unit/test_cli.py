"""``stateful-streams stores``: store directories inspected read-only, bad ones reported."""

from __future__ import annotations

import io
import json

from airflow_stateful_provider.cli import main
from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from airflow_stateful_provider.streams.state.session import RocksDBSessionStore
from airflow_stateful_provider.streams.state.session.key import SessionKey


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def make_state_dir(root):
    app = root / "app"
    kv = RocksDBKeyValueStore(app / "0_0" / "counts", name="counts")
    for i in range(50):
        kv.put(b"k%d" % i, b"v")
    kv.close()
    sessions = RocksDBSessionStore(app / "1_0" / "clicks", 300_000, name="clicks", inactivity_gap=300_000)
    sessions.put(SessionKey(b"user", 1_000, 2_000), b"\x00" * 8)
    sessions.close()
    return root


def test_lists_every_store_with_type_and_time(tmp_path):
    code, out = run("stores", str(make_state_dir(tmp_path)))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["store", "type"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["app/0_0/counts"][1] == "keyvalue"
    assert rows["app/1_0/clicks"][1] == "session"
    assert "5 min" in " ".join(rows["app/1_0/clicks"])  # the retention
    assert "1970-01-01 00:00:02 UTC" in " ".join(rows["app/1_0/clicks"])  # observed stream time


def test_json_output_and_a_store_open_for_writing(tmp_path):
    state_dir = make_state_dir(tmp_path)
    writer = RocksDBKeyValueStore(state_dir / "app" / "0_0" / "counts", name="counts")  # the "running" app
    try:
        code, out = run("stores", str(state_dir), "--json")
    finally:
        writer.close()
    assert code == 0
    rows = {row["path"]: row for row in json.loads(out)}
    assert rows["app/0_0/counts"]["type"] == "keyvalue" and rows["app/0_0/counts"]["bytes_on_disk"] > 0
    assert rows["app/1_0/clicks"]["observed_stream_time"] == 2_000


def test_a_corrupt_store_is_reported_and_the_others_still_listed(tmp_path):
    state_dir = make_state_dir(tmp_path)
    metadata = state_dir / "app" / "0_0" / "counts" / METADATA_FILE_NAME
    metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "format_version": 99}))
    code, out = run("stores", str(state_dir))
    assert code == 1
    assert "ERROR" in out and "99" in out
    assert "app/1_0/clicks" in out


def test_a_directory_without_stores_is_an_error_naming_what_a_state_dir_holds(tmp_path, capsys):
    (tmp_path / "etc" / "ssl").mkdir(parents=True)
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    for argv in (("stores", str(tmp_path / "etc")), ("stores", str(tmp_path / "etc"), "--json")):
        code, out = run(*argv)
        assert code == 1
        assert "no state stores" not in out
        err = capsys.readouterr().err
        assert f"error: no state store under {tmp_path / 'etc'}" in err
        assert f"<application_id>/<task>/<store>/ with a {METADATA_FILE_NAME}" in err


def test_a_rocksdb_directory_the_engine_refuses_is_listed_with_its_reason(tmp_path, capsys):
    """Kafka Streams' own layout (<task>/rocksdb/<store>), or a store whose metadata is lost:
    RocksDB files without store metadata. Listed as refused (exit 1), not 'no state stores'."""
    state_dir = make_state_dir(tmp_path)
    kafka_streams_store = state_dir / "app" / "0_0" / "rocksdb" / "counts"
    kafka_streams_store.parent.mkdir(parents=True)
    (state_dir / "app" / "0_0" / "counts").rename(kafka_streams_store)
    (kafka_streams_store / METADATA_FILE_NAME).unlink()
    code, out = run("stores", str(state_dir))
    assert code == 1
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "ERROR" in rows["app/0_0/rocksdb/counts"]
    assert f"is not a store directory: it has no {METADATA_FILE_NAME}" in rows["app/0_0/rocksdb/counts"]
    assert "ERROR" not in rows["app/1_0/clicks"]
    assert "1 of 2 store(s)" in capsys.readouterr().err

    # the refused store alone: still an error, never "no state stores"
    code, out = run("stores", str(kafka_streams_store.parent), "--json")
    assert code == 1
    assert [row["path"] for row in json.loads(out)] == ["counts"] and "error" in json.loads(out)[0]


def test_missing_state_dir_is_an_error(tmp_path, capsys):
    code, _ = run("stores", str(tmp_path / "nope"))
    assert code == 1
    assert "does not exist" in capsys.readouterr().err


def test_client_config_file_reaches_the_status_reader(tmp_path, monkeypatch, capsys):
    from airflow_stateful_provider.streams.errors import UnknownApplicationError

    seen = {}

    def fake_fetch(servers, application_id, **kwargs):
        seen.update(kwargs)
        raise UnknownApplicationError("nothing here")

    monkeypatch.setattr("airflow_stateful_provider.streams.status.reader.fetch_application_status",
                        fake_fetch)
    config = tmp_path / "client.json"
    config.write_text(json.dumps({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                  "bootstrap_servers": "ignored:1"}))
    assert main(["status", "app", "--bootstrap-servers", "b:9092", "--client-config", str(config)]) == 1
    assert seen["client_configs"] == {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}
    assert capsys.readouterr().err == "error: nothing here\n"

    config.write_text("[1, 2]")
    assert main(["stop", "app", "--bootstrap-servers", "b:9092", "--client-config", str(config)]) == 2
    assert capsys.readouterr().err == \
        f"error: --client-config '{config}' must hold a JSON object of kafka-python settings, got list\n"
