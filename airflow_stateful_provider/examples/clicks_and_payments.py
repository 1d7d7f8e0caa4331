"""Example topology: click sessions per user, and payments priced in USD as of their time.

Two independent pipelines in one application (docs/example-pipeline.md)::

    clicks (key user)  -> session windows per user, emitted once on window close -> user-sessions
    payments (key user) -> re-key by currency -> as-of join with the versioned
                           table currency-rates (key currency) -> re-key by payment id -> payments-usd

Record formats (JSON values, string keys; the record timestamp is the event time and
equals ``ts`` in the value):

- ``clicks``: key user, ``{"user", "page", "ts"}``
- ``payments``: key user, ``{"payment_id", "user", "amount", "currency", "ts"}``
- ``currency-rates``: key currency code, ``{"currency", "rate_to_usd", "ts"}``
- ``user-sessions``: key ``Windowed(user, [start, end])`` written with
  ``SessionWindowedSerde(Serdes.string())``, value ``{"user", "start", "end", "clicks", "pages"}``
  (``pages``: the distinct pages visited, sorted)
- ``payments-usd``: key payment id, value the payment plus ``"rate"``, ``"rate_ts"`` and
  ``"amount_usd"`` (``round(amount * rate, 2)``); all three are null when no rate was valid
  at the payment's time (left join: every payment comes out once, none is dropped silently).

Sessions use ``EmitStrategy.on_window_close()``: one final result per session, no
tombstones and no intermediate updates, so consumers (and correctness checks) read a
plain table of finished sessions; the price is latency, a session appears once stream
time passes its end + gap + grace. Settings come from ``config.app_configs``
(:class:`ExampleSettings`, keys and defaults below).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from airflow_stateful_provider.streams import (
    ConfigError,
    Consumed,
    EmitStrategy,
    Grouped,
    Joined,
    Materialized,
    Produced,
    Serdes,
    SessionWindowedSerde,
    SessionWindows,
    StreamsBuilder,
    StreamsConfig,
    Topology,
    Windowed,
    duration_ms,
)

__all__ = [
    "CLICKS_TOPIC",
    "DEFAULT_RATES_HISTORY_RETENTION_MS",
    "DEFAULT_SESSIONS_RETENTION_MS",
    "DEFAULT_SESSION_GAP_MS",
    "DEFAULT_SESSION_GRACE_MS",
    "JOIN_NAME",
    "PAYMENTS_TOPIC",
    "PAYMENTS_USD_TOPIC",
    "RATES_STORE",
    "RATES_TOPIC",
    "SESSIONS_STORE",
    "SESSIONS_TOPIC",
    "ExampleSettings",
    "build_topology",
    "price_payment",
]

CLICKS_TOPIC = "clicks"
PAYMENTS_TOPIC = "payments"
RATES_TOPIC = "currency-rates"
SESSIONS_TOPIC = "user-sessions"
PAYMENTS_USD_TOPIC = "payments-usd"

DEFAULT_SESSION_GAP_MS = 30 * 60_000
DEFAULT_SESSION_GRACE_MS = 5 * 60_000
#: A day, not the DSL default gap + grace: emit-on-window-close looks in the session store for
#: sessions that just closed, and a jump of stream time that expires a whole segment first
#: (segment interval = retention / 2) loses the sessions in it (see docs/example-pipeline.md).
DEFAULT_SESSIONS_RETENTION_MS = 24 * 3_600_000
DEFAULT_RATES_HISTORY_RETENTION_MS = 24 * 3_600_000

#: State store names (changelogs ``<application_id>-<store>-changelog``).
SESSIONS_STORE = "user-sessions-store"
RATES_STORE = "currency-rates-store"
#: Name of the join; the re-keyed payments go through ``<application_id>-payments-by-currency-left-repartition``.
JOIN_NAME = "payments-by-currency"


@dataclasses.dataclass(frozen=True)
class ExampleSettings:
    """The example's settings, read from ``StreamsConfig.app_configs`` (same key names).

    Durations are int milliseconds or timedelta; unknown app_configs keys are ignored
    because the application may carry settings for other code.
    """

    clicks_topic: str = CLICKS_TOPIC
    payments_topic: str = PAYMENTS_TOPIC
    rates_topic: str = RATES_TOPIC
    sessions_topic: str = SESSIONS_TOPIC
    payments_usd_topic: str = PAYMENTS_USD_TOPIC
    session_gap_ms: int = DEFAULT_SESSION_GAP_MS
    session_grace_ms: int = DEFAULT_SESSION_GRACE_MS
    sessions_retention_ms: int = DEFAULT_SESSIONS_RETENTION_MS
    rates_history_retention_ms: int = DEFAULT_RATES_HISTORY_RETENTION_MS

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name.endswith("_topic"):
                if not isinstance(value, str) or not value.strip():
                    raise ConfigError(f"app_configs[{field.name!r}] must be a non-empty topic name, got {value!r}")
            else:
                minimum = 1 if field.name == "session_gap_ms" else 0
                object.__setattr__(self, field.name, duration_ms(value, f"app_configs[{field.name!r}]",
                                                                 minimum=minimum))
        if self.sessions_retention_ms < self.session_gap_ms + self.session_grace_ms:
            raise ConfigError(
                f"app_configs['sessions_retention_ms'] ({self.sessions_retention_ms}) must be at least "
                f"session_gap_ms + session_grace_ms ({self.session_gap_ms + self.session_grace_ms})")

    @classmethod
    def from_app_configs(cls, app_configs: Mapping[str, Any]) -> ExampleSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in app_configs.items() if k in names})

    @property
    def input_topics(self) -> tuple[str, str, str]:
        return (self.clicks_topic, self.payments_topic, self.rates_topic)

    @property
    def output_topics(self) -> tuple[str, str]:
        return (self.sessions_topic, self.payments_usd_topic)


def build_topology(config: StreamsConfig) -> Topology:
    """The example topology; topic names and windows from ``config.app_configs``."""
    settings = ExampleSettings.from_app_configs(config.app_configs)
    strings, json = Serdes.string(), Serdes.json()
    builder = StreamsBuilder()

    windows = SessionWindows.of_inactivity_gap_and_grace(settings.session_gap_ms, settings.session_grace_ms)
    (builder.stream(settings.clicks_topic, Consumed.with_(strings, json))
     .group_by_key(Grouped.with_(strings, json))
     .windowed_by(windows)
     .emit_strategy(EmitStrategy.on_window_close())
     .aggregate(_new_session, _add_click, _merge_sessions,
                Materialized.as_(SESSIONS_STORE).with_value_serde(json)
                .with_retention(settings.sessions_retention_ms))
     .to_stream()
     .map(_session_result)
     .to(settings.sessions_topic, Produced.with_(SessionWindowedSerde(strings), json)))

    rates = builder.table(settings.rates_topic, Consumed.with_(strings, json),
                          Materialized.as_versioned(RATES_STORE, settings.rates_history_retention_ms))
    (builder.stream(settings.payments_topic, Consumed.with_(strings, json))
     .select_key(_payment_currency)
     .left_join(rates, price_payment, Joined(key_serde=strings, value_serde=json, name=JOIN_NAME))
     .select_key(lambda currency, priced: priced["payment_id"])
     .to(settings.payments_usd_topic, Produced.with_(strings, json)))
    return builder.build()


# ------------------------------------------------------------------ sessions


def _new_session() -> dict[str, Any]:
    return {"clicks": 0, "pages": []}


def _add_click(user: str, click: Any, session: dict[str, Any]) -> dict[str, Any]:
    page = _field(click, "page", str, "click")
    pages = session["pages"] if page in session["pages"] else sorted([*session["pages"], page])
    return {"clicks": session["clicks"] + 1, "pages": pages}


def _merge_sessions(user: str, one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    return {"clicks": one["clicks"] + other["clicks"], "pages": sorted(set(one["pages"]) | set(other["pages"]))}


def _session_result(windowed: Windowed, session: dict[str, Any]) -> tuple[Windowed, dict[str, Any]]:
    """The output value carries the window too, so a reader needs no windowed-key decoding."""
    window = windowed.window
    return windowed, {"user": windowed.key, "start": window.start, "end": window.end, **session}


# ------------------------------------------------------------------ payments


def _payment_currency(user: str, payment: Any) -> str:
    return _field(payment, "currency", str, "payment")


def price_payment(payment: Any, rate: dict[str, Any] | None) -> dict[str, Any]:
    """The payment with the rate valid at its time: ``amount_usd = round(amount * rate, 2)``;
    rate, rate_ts and amount_usd are None when no rate was valid then."""
    amount = _field(payment, "amount", (int, float), "payment")
    _field(payment, "payment_id", str, "payment")
    if rate is None:
        return {**payment, "rate": None, "rate_ts": None, "amount_usd": None}
    factor = _field(rate, "rate_to_usd", (int, float), "currency rate")
    return {**payment, "rate": factor, "rate_ts": rate.get("ts"), "amount_usd": round(amount * factor, 2)}


def _field(value: Any, name: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``value[name]``, checked: a malformed record fails naming the field and the value."""
    if not isinstance(value, dict) or not isinstance(value.get(name), kind) or isinstance(value.get(name), bool):
        raise ValueError(f"{what} value needs a {name!r} field of type "
                         f"{'/'.join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))}, "
                         f"got {value!r}")
    return value[name]
