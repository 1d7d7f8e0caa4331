"""Least privilege on a broker with Kafka's StandardAuthorizer (docs/deploying.md, "Least
privilege: the ACLs"): an application (exactly-once) and the CLI run under exactly the ACLs of
that table, read from the document itself; without any one row, the error names that ACL
(operation, resource type, name) instead of a timeout or a library's error.

One broker for the module: OAUTHBEARER over TLS (the principal is the token's subject), the
plaintext listener's ANONYMOUS a super user for the set-up and the oracles. Each removal case
has its own application id and topics, so the grants of the others do not leak into it."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import time
import uuid
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

from airflow_stateful_provider.cli import main as cli_main
from airflow_stateful_provider.streams import AuthorizationError, KafkaStreams, KafkaStreamsState, StreamsConfig
from tests.integration.topologies import json_counts
from tools.kafka.broker import LocalKafkaBroker, SecuredListeners
from tools.kafka.certificates import CertificateAuthority, unsecured_jwt
from tools.kafka.topics import create_topics, produce, read_all
from tools.waits import wait_until

pytestmark = pytest.mark.kafka

DEPLOYING = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"
#: The token's subject is the principal (User:<subject>).
SUBJECTS = {"application": "streams-app", "application, exactly-once": "streams-app", "reader": "streams-oncall",
            "maintenance": "streams-oncall"}
#: A removed ACL must show within this bound (the errors come at start or at the first fetch,
#: send or join; a timeout would take the Kafka clients' 30 s and more).
ERROR_BOUND_S = 15


def app_token() -> str:
    return unsecured_jwt(SUBJECTS["application"])


def oncall_token() -> str:
    return unsecured_jwt(SUBJECTS["reader"])


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the ACL table."""

    principal: str
    resource: str
    pattern: str
    name: str
    operation: str

    def __str__(self) -> str:
        return f"{self.principal}: {self.operation} on {self.resource} {self.pattern} {self.name}"

    def acl(self, names: dict[str, str]) -> ACL:
        resource = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                    "transactional id": ResourceType.TRANSACTIONAL_ID}[self.resource]
        pattern = {"literal": ACLResourcePatternType.LITERAL, "prefixed": ACLResourcePatternType.PREFIXED}[self.pattern]
        operation = ACLOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", self.operation).upper()]
        return ACL(f"User:{SUBJECTS[self.principal]}", "*", operation, ACLPermissionType.ALLOW,
                   ResourcePattern(resource, self.resolved(names), pattern))

    def resolved(self, names: dict[str, str]) -> str:
        name = self.name.strip("`")
        for placeholder, value in names.items():
            name = name.replace(placeholder, value)
        return name


def documented_rows() -> list[Row]:
    lines = DEPLOYING.read_text().splitlines()
    start = lines.index("| principal | resource | pattern | name | operation | why |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        principal, resource, pattern, name, operation, _ = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append(Row(principal, resource, pattern, name, operation))
    return rows


ROWS = documented_rows()
APPLICATION_ROWS = [r for r in ROWS if r.principal.startswith("application")]
ONCALL_ROWS = [r for r in ROWS if not r.principal.startswith("application")]


@dataclasses.dataclass
class AclKafka:
    broker: LocalKafkaBroker
    ca: Path
    admin: KafkaAdminClient

    @property
    def plaintext(self) -> str:
        return self.broker.bootstrap_servers

    def client_configs(self, token_function: str) -> dict:
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "ssl_cafile": str(self.ca),
                "sasl_oauth_token_provider": f"tests.integration.test_least_privilege:{token_function}"}

    def grant(self, acls: list[ACL]) -> None:
        result = self.admin.create_acls(acls)
        assert not result["failed"], result["failed"]
        self._wait_visible(acls, present=True)

    def revoke(self, acl: ACL) -> None:
        self.admin.delete_acls([ACLFilter(acl.principal, acl.host, acl.operation, acl.permission_type,
                                          ResourcePatternFilter(acl.resource_pattern.resource_type,
                                                                acl.resource_pattern.resource_name,
                                                                acl.resource_pattern.pattern_type))])
        self._wait_visible([acl], present=False)

    def _wait_visible(self, acls: list[ACL], *, present: bool) -> None:
        """Until the broker's authorizer (which answers DescribeAcls) has applied the change."""
        def applied() -> bool:
            described, _ = self.admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                              ResourcePatternFilter(ResourceType.ANY, None,
                                                                                    ACLResourcePatternType.ANY)))
            have = set(described)
            return all((acl in have) == present for acl in acls)
        wait_until(applied, 10, f"ACLs {'granted' if present else 'revoked'}: {acls}", interval=0.05)


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory):
    directory = tmp_path_factory.mktemp("acl-kafka")
    ca = CertificateAuthority(directory / "tls")
    listeners = SecuredListeners(keystore=ca.issue("broker", server=True).keystore,
                                 wrong_name_keystore=ca.issue("elsewhere", server=True,
                                                              hosts=("broker.invalid",)).keystore,
                                 truststore=ca.cert)
    broker = LocalKafkaBroker(work_dir=directory / "kafka", security=listeners, authorizer=True).start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        yield AclKafka(broker, ca.cert, admin)
    finally:
        admin.close()
        broker.stop()


def new_application(acl_kafka: AclKafka, tmp_path: Path) -> tuple[dict[str, str], StreamsConfig]:
    """Topics of a fresh application (input and output outside its prefix, its changelog
    made ahead so that the start checks its configs) with 3 input records; its config."""
    app = f"lp-{uuid.uuid4().hex[:8]}"
    names = {"<application_id>": app, "<input topic>": f"in-{app}", "<output topic>": f"out-{app}"}
    changelog = f"{app}-counts-changelog"
    create_topics(acl_kafka.plaintext, {names["<input topic>"]: 1, names["<output topic>"]: 1, changelog: 1},
                  configs={changelog: {"cleanup.policy": "compact"}})
    produce(acl_kafka.plaintext, names["<input topic>"], [(b"k1", b"{}"), (b"k2", b"{}"), (b"k1", b"{}")])
    config = StreamsConfig.from_mapping({
        "application_id": app, "bootstrap_servers": acl_kafka.broker.secured_bootstrap_servers("OAUTH"),
        "client_configs": acl_kafka.client_configs("app_token"), "state_dir": str(tmp_path / app),
        "instance_id": f"{app}-0", "processing_guarantee": "exactly_once_v2", "commit_interval_ms": 100,
        "status_interval_ms": 200,
        "consumer_configs": {"session_timeout_ms": 6_000, "heartbeat_interval_ms": 500}})
    return names, config


def cli(acl_kafka: AclKafka, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    settings = tmp_path / "oncall.json"
    settings.write_text(json.dumps(acl_kafka.client_configs("oncall_token")))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err):
        code = cli_main([*args, "--bootstrap-servers", acl_kafka.broker.secured_bootstrap_servers("OAUTH"),
                         "--client-config", str(settings)], out=out)
    return code, out.getvalue(), err.getvalue()


def test_an_application_and_the_cli_run_under_exactly_the_documented_acls(acl_kafka, tmp_path):
    assert {r.principal for r in ROWS} == set(SUBJECTS), ROWS
    names, config = new_application(acl_kafka, tmp_path)
    app = names["<application_id>"]
    acl_kafka.grant([r.acl(names) for r in ROWS])
    streams = KafkaStreams(json_counts(names["<input topic>"], names["<output topic>"]), config)
    try:
        streams.start()
        wait_until(lambda: len(read_all(acl_kafka.plaintext, names["<output topic>"])) == 3, 30,
                   "the 3 counts, under exactly-once", lambda: f"{streams.state} {[t.error for t in streams.threads]}")
        assert streams.state is KafkaStreamsState.RUNNING
        code, out, err = cli(acl_kafka, tmp_path, "status", app, "--json")
        assert code == 0, err
        assert [i["instance_id"] for i in json.loads(out)["instances"]] == [f"{app}-0"]
        code, out, err = cli(acl_kafka, tmp_path, "stop", app, "--timeout", "20")
        assert code == 0, out + err
        assert streams.wait_for_state(KafkaStreamsState.NOT_RUNNING, timeout=10) is KafkaStreamsState.NOT_RUNNING
    finally:
        streams.close(timeout=20)
    counts = {r.key: int.from_bytes(r.value, "big") for r in read_all(acl_kafka.plaintext, names["<output topic>"])}
    assert counts == {b"k1": 2, b"k2": 1}, counts


def expected_error(row: Row, names: dict[str, str]):
    """An oracle for the message: the operation, the resource type and its name."""
    name = row.resolved(names)
    shown = re.escape(name) + (r"[^']*" if row.pattern == "prefixed" else "")
    return rf"needs the ACL {row.operation} on {re.escape(row.resource)} '{shown}'"


@pytest.mark.parametrize("missing", APPLICATION_ROWS, ids=str)
def test_the_application_without_one_acl_fails_naming_it(acl_kafka, tmp_path, missing):
    names, config = new_application(acl_kafka, tmp_path)
    acl_kafka.grant([r.acl(names) for r in APPLICATION_ROWS if r != missing])
    streams = KafkaStreams(json_counts(names["<input topic>"], names["<output topic>"]), config)
    started = time.monotonic()
    error: BaseException | None = None
    try:
        streams.start()
    except AuthorizationError as refused:
        error = refused
    else:
        state = streams.wait_for_state(KafkaStreamsState.ERROR, timeout=ERROR_BOUND_S)
        assert state is KafkaStreamsState.ERROR, f"no error within {ERROR_BOUND_S}s without {missing}: {state}"
        error = next(t.error for t in streams.threads if t.error is not None)
    finally:
        streams.close(timeout=20)
    assert time.monotonic() - started < ERROR_BOUND_S
    assert isinstance(error, AuthorizationError), repr(error)
    assert (error.operation, error.resource_type) == (missing.operation, missing.resource), error
    assert re.search(expected_error(missing, names), str(error)), str(error)


@pytest.fixture(scope="module")
def running_application(acl_kafka, tmp_path_factory):
    """An application under every application ACL, for the on-call principal's cases."""
    names, config = new_application(acl_kafka, tmp_path_factory.mktemp("running"))
    acl_kafka.grant([r.acl(names) for r in APPLICATION_ROWS])
    streams = KafkaStreams(json_counts(names["<input topic>"], names["<output topic>"]), config)
    streams.start()
    try:
        assert streams.wait_for_state(KafkaStreamsState.RUNNING, timeout=30) is KafkaStreamsState.RUNNING
        yield names
    finally:
        streams.close(timeout=20)


@pytest.mark.parametrize("missing", ONCALL_ROWS, ids=str)
def test_the_cli_without_one_acl_fails_naming_it(acl_kafka, running_application, tmp_path, missing):
    names = running_application
    acl_kafka.grant([r.acl(names) for r in ONCALL_ROWS])
    acl_kafka.revoke(missing.acl(names))
    command = ["stop", names["<application_id>"], "--timeout", "5"] if missing.principal == "maintenance" \
        else ["status", names["<application_id>"]]
    started = time.monotonic()
    try:
        code, out, err = cli(acl_kafka, tmp_path, *command)
    finally:
        acl_kafka.grant([missing.acl(names)])
    assert time.monotonic() - started < ERROR_BOUND_S
    assert code == 1, out + err
    assert re.search(expected_error(missing, names), err), err


def test_the_application_refused_read_on_its_control_topic_fails_at_start(acl_kafka, tmp_path):
    """Every documented ACL, and a DENY of Read on the control topic: the brokers' metadata
    answer says Read is refused, so start() fails naming the topic before any stream thread
    runs (the control listener's first fetch, which would wait, is only the fallback)."""
    names, config = new_application(acl_kafka, tmp_path)
    control = f"{names['<application_id>']}-control"
    deny = ACL(f"User:{SUBJECTS['application']}", "*", ACLOperation.READ, ACLPermissionType.DENY,
               ResourcePattern(ResourceType.TOPIC, control, ACLResourcePatternType.LITERAL))
    acl_kafka.grant([r.acl(names) for r in APPLICATION_ROWS] + [deny])
    streams = KafkaStreams(json_counts(names["<input topic>"], names["<output topic>"]), config)
    try:
        with pytest.raises(AuthorizationError) as refused:
            streams.start()
        assert streams.threads == [] and streams.control_listener is None
    finally:
        streams.close(timeout=20)
    assert (refused.value.operation, refused.value.resource_type, refused.value.resource_names) == \
        ("Read", "topic", (control,)), refused.value
    assert "reading commands on the control topic" in str(refused.value)
