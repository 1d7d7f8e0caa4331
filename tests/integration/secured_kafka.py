"""The secured test broker (tests/conftest.py's ``secured_kafka`` fixture): its listeners, the
TLS material the tests were issued, and the ``stateful_streams`` connections that reach it."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from tools.kafka.broker import LocalKafkaBroker
from tools.kafka.certificates import CertificateAuthority, IssuedCertificate, unsecured_jwt

#: A token provider by import path, as a connection names it (Airflow workers, executors).
TOKEN_PROVIDER = "tests.integration.secured_kafka:fresh_token"


def fresh_token() -> str:
    """What an OAUTHBEARER token provider function returns: a token valid for an hour."""
    return unsecured_jwt("streams-app")


@dataclasses.dataclass(frozen=True)
class SecuredKafka:
    broker: LocalKafkaBroker
    ca: CertificateAuthority
    #: The client certificate the broker trusts; its key is encrypted with ``client.password``.
    client: IssuedCertificate
    #: A client certificate of a CA the broker does not trust.
    stranger: IssuedCertificate

    @property
    def plaintext(self) -> str:
        """The unsecured listener, for the tests' own set-up and oracles."""
        return self.broker.bootstrap_servers

    def mtls(self, **extra: Any) -> dict[str, Any]:
        """Connection (Airflow's JSON form) over mutual TLS; ``extra`` overrides extras."""
        return {"conn_type": "stateful_streams", "host": self.broker.secured_bootstrap_servers("MTLS"),
                "extra": {"security_protocol": "SSL", "ssl_cafile": str(self.ca.cert),
                          "ssl_certfile": str(self.client.cert), "ssl_keyfile": str(self.client.key),
                          "ssl_password": self.client.password, **extra}}

    def oauth(self, *, token: str | None = None, provider: str | None = None, **extra: Any) -> dict[str, Any]:
        """Connection over SASL_SSL with OAUTHBEARER: a fixed ``token`` (the password) or a provider path."""
        return {"conn_type": "stateful_streams", "host": self.broker.secured_bootstrap_servers("OAUTH"),
                **({"password": token} if token else {}),
                "extra": {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER",
                          "ssl_cafile": str(self.ca.cert),
                          **({"sasl_oauth_token_provider": provider} if provider else {}), **extra}}

    def wrong_name(self, **extra: Any) -> dict[str, Any]:
        """Connection over TLS to a listener whose certificate names another host."""
        return {"conn_type": "stateful_streams", "host": self.broker.secured_bootstrap_servers("WRONGNAME"),
                "extra": {"security_protocol": "SSL", "ssl_cafile": str(self.ca.cert), **extra}}


def expired_token() -> str:
    return unsecured_jwt("streams-app", issued_at=time.time() - 7200, lifetime_s=3600)
