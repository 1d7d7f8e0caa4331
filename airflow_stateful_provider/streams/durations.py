"""Durations: int milliseconds or a timedelta, turned into int milliseconds.

Three flavours for three audiences: :func:`duration_ms` checks engine configuration and raises
``ConfigError``; :func:`duration_arg_ms` checks the arguments of the engine's readers (timeouts,
staleness bounds named ``..._ms``) and raises ``ValueError``; :func:`seconds_arg_ms` checks the
durations the Airflow hook, operators, sensors and triggers take, which follow Airflow's
convention (a number is seconds, or a timedelta) and raises ``ValueError``. All name the argument.
"""

from __future__ import annotations

from datetime import timedelta

from airflow_stateful_provider.streams.errors import ConfigError

__all__ = ["duration_arg_ms", "duration_ms", "seconds_arg_ms"]


def duration_ms(value: int | timedelta, name: str, *, minimum: int | None = None) -> int:
    """Convert a duration given as int milliseconds or a timedelta to int milliseconds.

    ``name`` is used in the error message so the user sees which argument was bad.
    A timedelta with sub-millisecond precision is refused rather than silently truncated.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be int milliseconds or a timedelta, got bool {value!r}")
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros % 1000:
            raise ConfigError(f"{name} must be a whole number of milliseconds, got {value!r}")
        ms = micros // 1000
    elif isinstance(value, int):
        ms = value
    else:
        raise ConfigError(
            f"{name} must be int milliseconds or a timedelta, got {type(value).__name__} {value!r}"
        )
    if minimum is not None and ms < minimum:
        raise ConfigError(f"{name} must be >= {minimum} ms, got {ms} ms")
    return ms


def duration_arg_ms(value: int | timedelta, name: str, *, minimum: int = 0) -> int:
    """A reader-side duration argument (timeouts, staleness bounds): int milliseconds or a
    timedelta -> int milliseconds; anything else, or below ``minimum``, is a ValueError naming it."""
    if isinstance(value, timedelta):
        value = int(value.total_seconds() * 1000)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int of milliseconds >= {minimum} or a timedelta, got {value!r}")
    return value


def seconds_arg_ms(value: float | timedelta, name: str, *, minimum_ms: int = 0) -> int:
    """An Airflow-side duration argument (hook, operators, sensors, triggers): seconds as an int
    or a float, or a timedelta, as Airflow's own ``timeout``/``poke_interval`` -> int milliseconds
    (rounded to the nearest). Anything else, or below ``minimum_ms``, is a ValueError naming it."""
    if isinstance(value, timedelta):
        ms = round(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and value not in (float("inf"), float("-inf")):
        ms = round(value * 1000)
    else:
        raise ValueError(f"{name} must be a number of seconds or a timedelta, got {type(value).__name__} {value!r}")
    if ms < minimum_ms:
        raise ValueError(f"{name} must be >= {minimum_ms / 1000:g} s (a number of seconds or a timedelta), "
                         f"got {value!r}")
    return ms
