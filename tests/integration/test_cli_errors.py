"""The installed ``stateful-streams`` command never prints a traceback.

Every subcommand is run, as a separate process of the installed entry point, with bad
input: settings files that are not JSON or name unknown settings, unreachable or unknown
brokers and applications, state directories and stores the engine refuses, snapshot
locations that do not exist, an S3 server without credentials. Each must exit non-zero
with exactly one line on stderr that says what is wrong, and no "Traceback" anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_stateful_provider.streams.state.common.metadata import METADATA_FILE_NAME
from airflow_stateful_provider.streams.state.keyvalue import RocksDBKeyValueStore
from tests.integration.s3_server import free_port, moto_s3_server, s3_storage_options

pytestmark = pytest.mark.kafka

COMMAND = str(Path(sys.executable).parent / "stateful-streams")
#: Environment variables that would change what the command reads.
IGNORED_ENV_PREFIXES = ("STATEFUL_STREAMS_", "AWS_", "AIRFLOW_CONN_")


@dataclasses.dataclass
class Context:
    servers: str
    tmp_path: Path
    s3_endpoint: str

    @property
    def unreachable(self) -> str:
        return f"127.0.0.1:{free_port()}"

    def file(self, name: str, text: str) -> str:
        path = self.tmp_path / name
        path.write_text(text)
        return str(path)

    def state_dir_with_a_refused_store(self) -> str:
        """Two stores; one has a metadata format this build does not know."""
        state_dir = self.tmp_path / "state"
        for task in ("0_0", "0_1"):
            store = RocksDBKeyValueStore(state_dir / "app" / task / "counts", name="counts")
            store.put(b"k", b"v")
            store.close()
        metadata = state_dir / "app" / "0_1" / "counts" / METADATA_FILE_NAME
        metadata.write_text(json.dumps({**json.loads(metadata.read_text()), "format_version": 99}))
        return str(state_dir)

    def state_dir_with_a_corrupt_store(self) -> str:
        state_dir = self.tmp_path / "corrupt"
        store = RocksDBKeyValueStore(state_dir / "app" / "0_0" / "counts", name="counts")
        store.put(b"k", b"v")
        store.close()
        for path in (state_dir / "app" / "0_0" / "counts" / "rocksdb").iterdir():
            if path.is_file():
                path.write_bytes(b"garbage")
        return str(state_dir)

    def snapshot_location(self) -> str:
        """A file:// location holding one application's directory."""
        (self.tmp_path / "snapshots" / "other-app" / "0_0").mkdir(parents=True)
        return (self.tmp_path / "snapshots").as_uri()

    def s3_options(self, *, credentials: bool) -> str:
        options = s3_storage_options(self.s3_endpoint)
        if not credentials:
            options = {"client_kwargs": options["client_kwargs"]}
        return self.file(f"s3-options-{credentials}.json", json.dumps(options))


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Context], list[str]]
    exit_code: int
    #: What the one line on stderr must contain.
    says: tuple[str, ...]
    env: Callable[[Context], dict[str, str]] = lambda ctx: {}


CASES = [
    # status and stop: settings files and brokers
    Case("status: unknown --client-config setting",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers,
                    "--client-config", c.file("typo.json", '{"sesion_timeout_ms": 6000}')],
         2, ("--client-config", "'sesion_timeout_ms'", "did you mean 'session_timeout_ms'")),
    Case("status: --client-config value of the wrong type",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers,
                    "--client-config", c.file("type.json", '{"request_timeout_ms": "soon"}')],
         2, ("request_timeout_ms must be an int",)),
    Case("status: --client-config not JSON",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers, "--client-config", c.file("bad.json", "{x")],
         2, ("--client-config", "is not valid JSON")),
    Case("status: --client-config a JSON list",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers, "--client-config", c.file("list.json", "[1]")],
         2, ("must hold a JSON object",)),
    Case("status: --client-config missing",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers, "--client-config", str(c.tmp_path / "nope")],
         2, ("--client-config", "No such file")),
    Case("status: client config from the environment with an unknown setting",
         lambda c: ["status", "app", "--bootstrap-servers", c.servers],
         2, ("'lingr_ms'", "did you mean 'linger_ms'"),
         env=lambda c: {"STATEFUL_STREAMS_CLIENT_CONFIG": c.file("env.json", '{"lingr_ms": 5}')}),
    Case("status: bootstrap port not a number", lambda c: ["status", "app", "--bootstrap-servers", "localhost:abc"],
         2, ("--bootstrap-servers", "'localhost:abc'")),
    Case("status: bootstrap port out of range", lambda c: ["status", "app", "--bootstrap-servers", "localhost:70000"],
         2, ("--bootstrap-servers", "1..65535")),
    Case("status: no bootstrap servers", lambda c: ["status", "app"], 2, ("--bootstrap-servers",)),
    Case("status: --stale-after 0", lambda c: ["status", "app", "--bootstrap-servers", c.servers, "--stale-after", "0"],
         2, ("--stale-after",)),
    Case("status: unreachable broker", lambda c: ["status", "app", "--bootstrap-servers", c.unreachable],
         3, ("cannot reach Kafka at 127.0.0.1:",)),
    Case("status --check: unknown application",
         lambda c: ["status", f"nope-{uuid.uuid4().hex[:6]}", "--check", "--bootstrap-servers", c.servers],
         1, ("unhealthy: unknown application",)),
    Case("status: unknown --conn-id", lambda c: ["status", "app", "--conn-id", "no_such_conn"],
         2, ("--conn-id 'no_such_conn'", "isn't defined", "AIRFLOW_CONN_NO_SUCH_CONN")),
    Case("status: --conn-id of an invalid connection", lambda c: ["status", "app", "--conn-id", "kafka_typo"],
         2, ("--conn-id 'kafka_typo'", "unknown extra field(s) ['bootstrap_server']"),
         env=lambda c: {"AIRFLOW_CONN_KAFKA_TYPO": json.dumps({"conn_type": "stateful_streams", "extra": {
             "bootstrap_server": c.servers}})}),
    Case("status: --conn-id and --bootstrap-servers",
         lambda c: ["status", "app", "--conn-id", "kafka", "--bootstrap-servers", c.servers],
         2, ("drop --bootstrap-servers",)),
    Case("status: unknown application",
         lambda c: ["status", f"nope-{uuid.uuid4().hex[:6]}", "--bootstrap-servers", c.servers],
         1, ("unknown application", "no status topic")),
    Case("stop: unknown application",
         lambda c: ["stop", f"nope-{uuid.uuid4().hex[:6]}", "--bootstrap-servers", c.servers, "--timeout", "10"],
         1, ("unknown application",)),
    Case("stop: unreachable broker", lambda c: ["stop", "app", "--bootstrap-servers", c.unreachable, "--timeout", "3"],
         3, ("cannot reach Kafka at 127.0.0.1:",)),
    Case("stop: --timeout 0", lambda c: ["stop", "app", "--bootstrap-servers", c.servers, "--timeout", "0"],
         2, ("--timeout",)),
    Case("stop: unknown --client-config setting",
         lambda c: ["stop", "app", "--bootstrap-servers", c.servers,
                    "--client-config", c.file("stop.json", '{"securty_protocol": "SSL"}')],
         2, ("'securty_protocol'", "did you mean 'security_protocol'")),
    # stores
    Case("stores: missing directory", lambda c: ["stores", str(c.tmp_path / "nope")], 1, ("does not exist",)),
    Case("stores: a file", lambda c: ["stores", c.file("state-file", "x")], 1, ("is not a directory",)),
    Case("stores: a store the engine refuses", lambda c: ["stores", c.state_dir_with_a_refused_store()],
         1, ("1 of 2 store(s)", "cannot be opened")),
    Case("stores: a corrupt RocksDB store", lambda c: ["stores", c.state_dir_with_a_corrupt_store(), "--json"],
         1, ("1 of 1 store(s)",)),
    # snapshots
    Case("snapshots list: missing location", lambda c: ["snapshots", "list", (c.tmp_path / "nope").as_uri(), "app"],
         1, ("snapshot location", "does not exist")),
    Case("snapshots list: unknown application", lambda c: ["snapshots", "list", c.snapshot_location(), "app"],
         1, ("no snapshots of application 'app'", "other-app")),
    Case("snapshots list: unknown task",
         lambda c: ["snapshots", "list", c.snapshot_location(), "other-app", "--task", "7_7"],
         1, ("no snapshots of task 7_7",)),
    Case("snapshots delete: missing location",
         lambda c: ["snapshots", "delete", (c.tmp_path / "nope").as_uri(), "app", "--keep", "1"],
         1, ("does not exist",)),
    Case("snapshots delete: --keep 0", lambda c: ["snapshots", "delete", c.snapshot_location(), "app", "--keep", "0"],
         2, ("--keep",)),
    Case("snapshots delete: --dry-run is gone (a plan is the default, --execute deletes)",
         lambda c: ["snapshots", "delete", c.snapshot_location(), "app", "--keep", "1", "--dry-run"],
         2, ("unrecognized arguments: --dry-run",)),
    Case("snapshots list: unknown scheme", lambda c: ["snapshots", "list", "foo://bucket", "app"],
         1, ("foo://bucket",)),
    Case("snapshots list: --storage-options not JSON",
         lambda c: ["snapshots", "list", c.snapshot_location(), "app", "--storage-options", c.file("o.json", "{")],
         2, ("--storage-options", "is not valid JSON")),
    Case("snapshots list: storage options from the environment not JSON",
         lambda c: ["snapshots", "list", c.snapshot_location(), "app"],
         2, ("STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS", "not valid JSON"),
         env=lambda c: {"STATEFUL_STREAMS_SNAPSHOT_STORAGE_OPTIONS": "{"}),
    Case("snapshots list: S3 without credentials",
         lambda c: ["snapshots", "list", "s3://snapshots/streams", "app",
                    "--storage-options", c.s3_options(credentials=False)],
         1, ("s3://snapshots/streams", "credentials")),
    Case("snapshots list: S3 bucket that does not exist",
         lambda c: ["snapshots", "list", f"s3://nope-{uuid.uuid4().hex[:8]}/streams", "app",
                    "--storage-options", c.s3_options(credentials=True)],
         1, ("does not exist",)),
    Case("snapshots list: a storage option the library refuses",
         lambda c: ["snapshots", "list", "s3://snapshots/streams", "app",
                    "--storage-options", c.file("odd.json", json.dumps({"no_such_option": 1}))],
         1, ("s3://snapshots/streams",)),
    # the command line itself
    Case("unknown command", lambda c: ["bogus"], 2, ("invalid choice: 'bogus'",)),
    Case("snapshots without an action", lambda c: ["snapshots"], 2, ("ACTION",)),
]


def test_every_case_has_its_own_id():
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    with moto_s3_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint


def clean_environment() -> dict[str, str]:
    """This process's environment without the command's own settings and any AWS credentials
    (an AWS instance-metadata lookup would wait for a server that is not there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(IGNORED_ENV_PREFIXES)}
    return {**env, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_CONFIG_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(case, bootstrap_servers, s3_endpoint, tmp_path):
    ctx = Context(bootstrap_servers, tmp_path, s3_endpoint)
    argv = case.argv(ctx)
    result = subprocess.run([COMMAND, *argv], capture_output=True, text=True, timeout=120,
                            env={**clean_environment(), **case.env(ctx)})
    shown = f"stateful-streams {' '.join(argv)}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert result.returncode == case.exit_code, shown
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, shown
    for words in case.says:
        assert words in lines[0], shown
