"""``stateful-streams query``: bad arguments are one line on stderr, before any connection
(the command against a running application: tests/integration/test_interactive_queries.py)."""

from __future__ import annotations

import io

import pytest

from airflow_stateful_provider.cli import main

SERVERS = ("--bootstrap-servers", "127.0.0.1:1")  # nothing listens: a connection attempt would fail


def run(*argv: str) -> int:
    return main(list(argv), out=io.StringIO())


@pytest.mark.parametrize("argv, message", [
    (("query", "app", "counts", *SERVERS), "query takes a KEY or --range FROM TO"),
    (("query", "app", "counts", "k", "--range", "a", "b", *SERVERS), "query takes a KEY or --range FROM TO"),
    (("query", "app", "counts", "k", "--timeout", "0", *SERVERS), "--timeout takes a positive number of seconds"),
    (("query", "app", "counts", "k"), "query needs --conn-id or --bootstrap-servers"),
])
def test_usage_errors_exit_2_naming_the_fix(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("STATEFUL_STREAMS_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(SystemExit) as exited:
        run(*argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_key_that_is_not_json_is_named(capsys):
    assert run("query", "app", "counts", "user-1", "--key-json", *SERVERS) == 2
    err = capsys.readouterr().err
    assert "--key-json: 'user-1' is not JSON" in err and "Traceback" not in err
