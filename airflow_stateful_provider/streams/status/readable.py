"""How the numbers of a status read to people: ages, durations, rates.

The snapshot's notes, the status table and the sensors' messages all use these, so the
same restoration reads the same everywhere.
"""

from __future__ import annotations

__all__ = ["age_text", "duration_text", "rate_text"]


def age_text(ms: int) -> str:
    return duration_text(ms / 1000)


def duration_text(seconds: float) -> str:
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def rate_text(rate: float) -> str:
    return f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s"
