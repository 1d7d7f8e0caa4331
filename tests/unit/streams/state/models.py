"""Tiny pure-Python reference models of the stores, written from docs/semantics.md §4/§5 alone.

They keep everything in plain dicts and recompute answers by brute force, so they are
easy to check by eye; the property tests drive a real store and a model with the same
operations and require identical answers.
"""

from __future__ import annotations

NOT_PUT = -(1 << 63)


class SessionModel:
    """Sessions by (key, start, end); segments by end time; Kafka's read visibility."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self.interval = max(retention // 2, 60_000)
        self.observed = -1
        self.data: dict[tuple[bytes, int, int], bytes] = {}

    def _min_live_segment(self) -> int:
        return (self.observed - self.retention) // self.interval

    def _advance(self, end: int) -> None:
        self.observed = max(self.observed, end)
        dead = self._min_live_segment()
        for session in [s for s in self.data if s[2] // self.interval < dead]:
            del self.data[session]

    def _visible(self, end: int) -> bool:
        return end >= self.observed - self.retention + 1

    def put(self, key: bytes, start: int, end: int, agg: bytes | None) -> None:
        if agg is None:
            self.remove(key, start, end)
            return
        self._advance(end)
        if end // self.interval >= self._min_live_segment():
            self.data[(key, start, end)] = agg

    def remove(self, key: bytes, start: int, end: int) -> None:
        self._advance(end)
        self.data.pop((key, start, end), None)

    def find_sessions(self, key: bytes, earliest_end: int, latest_start: int) -> list[tuple[bytes, int, int, bytes]]:
        hits = [
            (k, s, e, agg)
            for (k, s, e), agg in self.data.items()
            if k == key and e >= earliest_end and s <= latest_start and self._visible(e)
        ]
        return sorted(hits, key=lambda h: (h[2], h[1]))

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        if not self._visible(end):
            return None
        return self.data.get((key, start, end))

    def find_sessions_by_end(self, lo: int, hi: int) -> list[tuple[bytes, int, int, bytes]]:
        # no read cut-off here: emit-on-close asks for sessions that just left it
        hits = [(k, s, e, agg) for (k, s, e), agg in self.data.items() if lo <= e <= hi]
        return sorted(hits, key=lambda h: (h[2], h[0], h[1]))

    def enforce_retention(self, now: int) -> None:
        self._advance(now)


class VersionedModel:
    """Per key a dict valid_from -> value (None = tombstone)."""

    def __init__(self, history_retention: int, segment_interval: int) -> None:
        self.hr = history_retention
        self.interval = segment_interval
        self.observed = -1
        self.timelines: dict[bytes, dict[int, bytes | None]] = {}

    def _versions(self, key: bytes) -> list[tuple[int, bytes | None, int | None]]:
        """(valid_from, value, valid_to) ascending."""
        items = sorted(self.timelines.get(key, {}).items())
        return [(t, v, items[i + 1][0] if i + 1 < len(items) else None) for i, (t, v) in enumerate(items)]

    def put(self, key: bytes, value: bytes | None, ts: int) -> int:
        if ts < self.observed - self.hr:
            return NOT_PUT
        self.observed = max(self.observed, ts)
        self.timelines.setdefault(key, {})[ts] = value
        later = [t for t in self.timelines[key] if t > ts]
        return min(later) if later else -1

    def delete(self, key: bytes, ts: int) -> tuple[bytes, int, int | None] | None:
        if ts < self.observed - self.hr:
            return None
        existing = self.get(key, ts)
        self.put(key, None, ts)
        return existing

    def get(self, key: bytes, as_of: int | None = None) -> tuple[bytes, int, int | None] | None:
        versions = self._versions(key)
        if not versions:
            return None
        newest_from, newest_value, _ = versions[-1]
        if as_of is None or newest_from <= as_of:
            return None if newest_value is None else (newest_value, newest_from, None)
        if as_of < self.observed - self.hr:
            return None
        older = [v for v in versions if v[0] <= as_of]
        if not older or older[-1][1] is None:
            return None
        valid_from, value, valid_to = older[-1]
        return value, valid_from, valid_to  # type: ignore[return-value]

    def _retained(self, valid_to: int | None) -> bool:
        """Physically kept: the newest version, or one whose valid_to segment is live."""
        if valid_to is None:
            return True
        return valid_to // self.interval >= (self.observed - self.hr) // self.interval

    def get_versions(
        self, key: bytes, lo: int | None, hi: int | None, ascending: bool
    ) -> list[tuple[bytes, int, int | None]]:
        lo = 0 if lo is None else lo
        hi = (1 << 63) - 1 if hi is None else hi
        if lo > hi:
            return []
        versions = self._versions(key)
        if hi < self.observed - self.hr:
            versions = versions[-1:]  # beyond history retention only the newest answers
        result = [
            (v, f, t)
            for f, v, t in versions
            if v is not None and f <= hi and (t is None or t > lo) and self._retained(t)
        ]
        return result if ascending else result[::-1]

    def enforce_retention(self, now: int) -> None:
        self.observed = max(self.observed, now)
