"""``stateful-streams plan``: bad arguments are usage errors (exit 2) naming the value, found
before any broker is asked (the brokers given here do not exist)."""

from __future__ import annotations

import io
import json

import pytest

from airflow_stateful_provider.cli import main

NO_BROKER = "127.0.0.1:9"
TOPOLOGY = "tests.integration.redeploy_topologies:counts_and_visits"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["plan", "redeploy-x", "--bootstrap-servers", NO_BROKER, *argv], out=out)
    return code, out.getvalue()


@pytest.mark.parametrize(("argv", "message"), [
    (("--topology", "tests.integration.redeploy_topologies"),
     "error: --topology 'tests.integration.redeploy_topologies': topology reference must be "
     "'package.module:function'"),
    (("--topology", "tests.integration.no_such_module:build"),
     "error: --topology 'tests.integration.no_such_module:build': cannot import module 'tests.integration."
     "no_such_module'"),
])
def test_a_bad_topology_reference_is_a_usage_error(argv, message, capsys):
    code, out = run(*argv)
    assert (code, out) == (2, "")
    assert message in capsys.readouterr().err


def test_a_bad_timeout_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run("--topology", TOPOLOGY, "--timeout", "0")
    assert exit_info.value.code == 2
    assert "--timeout takes a positive number of seconds, got 0" in capsys.readouterr().err


def test_a_streams_config_of_another_application_is_refused(tmp_path, capsys):
    config = tmp_path / "streams.json"
    config.write_text(json.dumps({"application_id": "other", "default_key_serde": "string"}))
    assert run("--topology", TOPOLOGY, "--streams-config", str(config)) == (2, "")
    assert capsys.readouterr().err == ("error: --streams-config: application_id 'other' is another application "
                                       "than 'redeploy-x'\n")
    config.write_text(json.dumps({"default_key_serde": "avro"}))
    assert run("--topology", TOPOLOGY, "--streams-config", str(config)) == (2, "")
    assert "error: --streams-config: default_key_serde: unknown serde name 'avro'" in capsys.readouterr().err
