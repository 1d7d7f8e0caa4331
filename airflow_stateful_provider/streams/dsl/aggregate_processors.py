"""The processors of aggregations: per key into a key-value store, and per session window
into a session store (merging, grace, emit on update or on window close; docs/semantics.md §4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from airflow_stateful_provider.streams.dsl.change import Change
from airflow_stateful_provider.streams.dsl.dropped import log_dropped
from airflow_stateful_provider.streams.dsl.expiry import KeyExpiry
from airflow_stateful_provider.streams.processor import Processor, Record, trusted_record
from airflow_stateful_provider.streams.state.common.segments import segment_clock
from airflow_stateful_provider.streams.state.session.store import session_segment_interval
from airflow_stateful_provider.streams.windows import EmitStrategy, SessionWindows, Windowed, trusted_windowed

__all__ = ["SessionWindowAggregateProcessor", "StreamAggregateProcessor"]


class _NodeSwitchingContext(Protocol):
    """The runtime's context, whose current node a flush outside process() sets to forward as this node."""

    current_node: Any

    def forward(self, record: Any, child_name: str | None = None) -> None: ...


class StreamAggregateProcessor(Processor):
    """Non-windowed aggregation into a key-value store; forwards Change(new, old)."""

    def __init__(self, store_name: str, initializer: Callable[[], Any],
                 aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self._store_name = store_name
        self._initializer = initializer
        self._aggregator = aggregator

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)
        self._expiry = KeyExpiry(context, self._store, self._store_name)

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            log_dropped(self.context, "null-key-or-value", "an aggregation needs a key and a value")
            return
        if self._expiry.active and self._expiry.dropped(record):
            return
        old = self._store.get(record.key)
        agg = self._initializer() if old is None else old
        new = self._aggregator(record.key, record.value, agg)
        self._store.put(record.key, new)
        self.context.forward(record.with_value(Change(new, old)))


class SessionWindowAggregateProcessor(Processor):
    """Session window aggregation exactly as docs/semantics.md §4 / Kafka's KStreamSessionWindowAggregate."""

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        emit: EmitStrategy,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        *,
        retention_ms: int | None = None,
    ) -> None:
        self._store_name = store_name
        self._retention_ms = windows.default_retention_ms() if retention_ms is None else retention_ms
        self._gap = windows.inactivity_gap_ms
        self._grace = windows.grace_period_ms
        self._on_close = emit.type is EmitStrategy.StrategyType.ON_WINDOW_CLOSE
        self._initializer = initializer
        self._aggregator = aggregator
        self._merger = merger
        self._observed_stream_time = -1
        self._last_emit_window_close_time = -1
        self._next_time_to_emit = 0
        self._emit_interval_ms = 1000

    def init(self, context: Any) -> None:
        super().init(context)
        self._store = context.get_state_store(self._store_name)
        # the byte store's clock: observed stream time restored from the changelog, and the
        # retention cut-off of a maintenance run (docs/semantics.md §4)
        self._clock = segment_clock(self._store)
        interval = getattr(getattr(context, "config", None), "windowed_aggregation_emit_interval_ms", None)
        if interval is not None:
            self._emit_interval_ms = interval
        self._cached = False
        if not self._on_close:
            set_flush_listener = getattr(self._store, "set_flush_listener", None)
            if set_flush_listener is not None:
                self._node = getattr(context, "current_node", None)
                self._cached = set_flush_listener(self._forward_flushed)
        if self._on_close:
            # how the store expires sessions (its own figures when it exposes them: a reopened
            # store keeps the retention it was created with)
            retention = getattr(self._store, "retention_ms", None)
            interval = getattr(self._store, "segment_interval_ms", None)
            if type(retention) is not int or type(interval) is not int:
                retention, interval = self._retention_ms, session_segment_interval(self._retention_ms)
            self._retention_ms, self._segment_interval_ms = retention, interval
            # restore how far closed windows were already emitted (committed with the offsets)
            lookup = getattr(context, "processor_metadata_for_key", None)
            last = lookup(self._store_name) if lookup is not None else None
            if last is not None:
                self._last_emit_window_close_time = last

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            log_dropped(self.context, "null-key", "a session aggregation needs a key")
            return
        ts = record.timestamp
        if ts > self._observed_stream_time:
            self._observed_stream_time = ts
            if self._on_close:
                self._forward_before_expiry(record)
        clock = self._clock
        if clock is not None and clock.observed_stream_time > self._observed_stream_time:
            # the store is ahead: restored (a restarted or moved task) or moved by retention
            self._observed_stream_time = clock.observed_stream_time
        close_time = self._observed_stream_time - self._grace - self._gap
        store = self._store
        merged = store.find_sessions(key, ts - self._gap, ts + self._gap)
        agg = self._initializer()
        start = end = ts
        for session, _ in merged:
            if session.window.start < start:
                start = session.window.start
            if session.window.end > end:
                end = session.window.end
        for _, value in merged if len(merged) < 2 else _outermost(merged):
            agg = self._merger(key, agg, value)
        if end < close_time:
            cutoff = None if clock is None else clock.retention_cutoff
            if cutoff is not None and end < cutoff - self._grace - self._gap:
                log_dropped(
                    self.context,
                    "expired",
                    f"session [{start},{end}] of key {key!r} closed before the retention cut-off {cutoff} of a "
                    f"maintenance run (close time {cutoff - self._grace - self._gap}, timestamp {ts})",
                )
                if self._on_close:
                    self._maybe_forward_final(record, close_time)
                return
            log_dropped(
                self.context,
                "late",
                f"session [{start},{end}] of key {key!r} ends before the window close time {close_time} "
                f"(stream time {self._observed_stream_time}, timestamp {ts})",
            )
        else:
            agg = self._aggregator(key, record.value, agg)
            windowed = trusted_windowed(key, start, end)
            # merged with stored sessions (0 <= start <= ts <= end): they are replaced
            replaced = merged if start != ts or end != ts else ()
            if self._cached:  # the cache writes the merged session first (state/caching.py)
                for session, _ in replaced:
                    store.remove(session)
                store.put(windowed, agg)
            else:  # each write goes to the changelog at once: the merged session first, so
                # that a crash between the writes never leaves the store without the clicks
                store.put(windowed, agg)
                for session, _ in replaced:
                    if session.window.start != start or session.window.end != end:
                        store.remove(session)
            for session, value in replaced:
                self._forward_update(session, None, value)
            self._forward_update(windowed, agg, None)
        if self._on_close:
            self._maybe_forward_final(record, close_time)

    def _forward_flushed(self, windowed: Windowed, new: Any, old: Any) -> None:
        """A cached session written through (commit or eviction): forward it as this node."""
        context = cast(_NodeSwitchingContext, self.context)
        previous = context.current_node
        context.current_node = self._node
        try:
            context.forward(trusted_record(windowed, Change(new, old), windowed.window.end, ()))
        finally:
            context.current_node = previous

    def _forward_update(self, windowed: Windowed, new: Any, old: Any) -> None:
        if self._on_close or self._cached:
            return
        # a new record (no input headers), stamped with the window end, as Kafka does
        self.context.forward(trusted_record(windowed, Change(new, old), windowed.window.end, ()))

    def _forward_before_expiry(self, record: Record) -> None:
        """Forward the sessions the store is about to drop, before this record's put drops them.

        The put of a record that advances stream time to ``t`` moves the store's observed
        stream time to ``t`` and drops every segment below ``(t - retention) // interval``.
        Those sessions end before ``bound = that id * interval <= t - retention <= close
        time``, so they are closed, and the throttled scan after the put (or a later one)
        would no longer find them. Forward them now, bypassing the wall-clock throttle; at
        most once per segment interval of stream time. No session this record merges lies
        below ``bound`` (merged sessions end at ``>= ts - gap >= t - retention``), so the
        output is what an unthrottled scan after the put would forward, in the same order.
        """
        interval = self._segment_interval_ms
        bound = (self._observed_stream_time - self._retention_ms) // interval * interval
        if bound <= 0 or bound <= self._last_emit_window_close_time:
            return
        self._forward_closed(record, max(0, self._last_emit_window_close_time), bound - 1)
        self._set_last_emitted(bound)

    def _forward_closed(self, record: Record, lower: int, upper: int) -> None:
        """Forward every session with end in [lower, upper] (closed), in (end, key, start) order.

        The DSL gives this store the time index (state/session/index.py), so the lookup costs
        the sessions forwarded, not the live ones: at ``windowed_aggregation_emit_interval_ms``
        = 0 it runs for nearly every record."""
        for session, value in self._store.find_sessions_by_end(lower, upper):
            self.context.forward(Record(session, Change(value, None), session.window.end, record.headers))

    def _set_last_emitted(self, close_time: int) -> None:
        self._last_emit_window_close_time = close_time
        record_metadata = getattr(self.context, "add_processor_metadata_key_value", None)
        if record_metadata is not None:
            record_metadata(self._store_name, close_time)

    def _maybe_forward_final(self, record: Record, close_time: int) -> None:
        now = self.context.current_system_time_ms
        if now < self._next_time_to_emit:  # throttled (windowed_aggregation_emit_interval_ms)
            return
        self._next_time_to_emit = now + self._emit_interval_ms
        if self._last_emit_window_close_time != -1 and self._last_emit_window_close_time >= close_time:
            return
        upper = close_time - 1  # session bounds are inclusive
        if upper < 0:
            return
        lower = max(0, self._last_emit_window_close_time)
        if upper < lower:
            return
        self._forward_closed(record, lower, upper)
        self._set_last_emitted(close_time)


def _outermost(merged: list) -> list:
    """The sessions of ``merged`` that lie inside no other one. Sessions of a key never
    overlap, except after an at-least-once crash cut the changelog between a merged
    session and the removal of the sessions it replaced (state/caching.py): the restored
    store holds both, and the inner ones' aggregates are in the outer one already."""
    return [(session, value) for session, value in merged
            if not any(other is not session and other.window.start <= session.window.start
                       and session.window.end <= other.window.end for other, _ in merged)]
