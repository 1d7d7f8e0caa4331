"""Where an OAUTHBEARER client gets its tokens: kafka-python's ``sasl_oauth_token_provider``
from a value a JSON config can hold.

kafka-python wants an ``AbstractTokenProvider`` instance. A config written as JSON (the
runner's ``--config``, the Spark application's ``--config-json``, the CLI's
``--client-config``, an Airflow connection) names one by import path instead,
``"package.module:attribute"``, where the attribute is a provider class (instantiated
without arguments), a provider instance, or a function returning the token (called each
time a connection authenticates: caching and refreshing are its job). Every client of a
process that names the same path shares one provider, as kafka-python advises. A fixed
token travels as a :class:`StaticTokenProvider`, which never shows the token in a repr.

``AbstractTokenProvider`` comes from ``kafka.net.sasl.oauth``, a module kafka-python does not
export (checked against kafka-python 3.0.12).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from airflow_stateful_provider.streams.errors import ConfigError

__all__ = ["CallableTokenProvider", "StaticTokenProvider", "TokenProviderReference", "token_provider"]


class StaticTokenProvider(AbstractTokenProvider):
    """One fixed token (it expires when the token does)."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or not token:
            raise ConfigError("an OAUTHBEARER token must be a non-empty string")
        self._token = token

    def token(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return "StaticTokenProvider('***')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticTokenProvider) and other._token == self._token

    def __hash__(self) -> int:
        return hash(self._token)


class CallableTokenProvider(AbstractTokenProvider):
    """Asks ``function()`` for the token each time a connection authenticates."""

    def __init__(self, function: Callable[[], str], name: str) -> None:
        self._function = function
        self._name = name

    def token(self) -> str:
        value = self._function()
        if not isinstance(value, str) or not value:
            raise ConfigError(f"OAUTHBEARER token provider {self._name!r} returned {type(value).__name__}, "
                              f"not a non-empty token string")
        return value

    def __repr__(self) -> str:
        return f"CallableTokenProvider({self._name!r})"


class TokenProviderReference(AbstractTokenProvider):
    """A provider named by ``package.module:attribute``, imported on first use (picklable:
    it holds only the path)."""

    def __init__(self, path: str) -> None:
        module, sep, attribute = path.partition(":") if isinstance(path, str) else ("", "", "")
        if not sep or not module or not attribute:
            raise ConfigError(f"sasl_oauth_token_provider must be 'package.module:attribute' (a token provider "
                              f"class or instance, or a function returning the token), got {path!r}")
        self.path = path

    def resolve(self) -> AbstractTokenProvider:
        """The provider the path names (ConfigError naming the path when it names none)."""
        return _resolve(self.path)

    def token(self) -> str:
        return self.resolve().token()

    def extensions(self) -> dict[str, str]:
        return self.resolve().extensions()

    def __repr__(self) -> str:
        return f"TokenProviderReference({self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenProviderReference) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


def token_provider(value: Any) -> AbstractTokenProvider:
    """``sasl_oauth_token_provider`` as kafka-python takes it: a provider as it is, an import
    path as a :class:`TokenProviderReference`; anything else is a ConfigError."""
    if isinstance(value, AbstractTokenProvider):
        return value
    if isinstance(value, str):
        return TokenProviderReference(value)
    raise ConfigError(f"sasl_oauth_token_provider must be a kafka.net.sasl.oauth.AbstractTokenProvider or an import "
                      f"path 'package.module:attribute', got {type(value).__name__}")


@functools.cache
def _resolve(path: str) -> AbstractTokenProvider:
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"sasl_oauth_token_provider {path!r}: cannot import {module_name!r} ({exc}); install it "
                          f"where the Kafka clients run (Airflow workers and triggerer, Spark driver and "
                          f"executors)") from None
    target = getattr(module, attribute, None)
    if isinstance(target, type) and issubclass(target, AbstractTokenProvider):
        try:
            return target()
        except Exception as exc:  # noqa: BLE001 - the user's constructor; named with its error
            raise ConfigError(f"sasl_oauth_token_provider {path!r}: {target.__name__}() failed: "
                              f"{type(exc).__name__}: {exc}") from None
    if isinstance(target, AbstractTokenProvider):
        return target
    if callable(target):
        return CallableTokenProvider(target, path)
    raise ConfigError(f"sasl_oauth_token_provider {path!r}: module {module_name!r} has no token provider class or "
                      f"instance, or function, named {attribute!r}")
