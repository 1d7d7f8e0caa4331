"""The instance side of the control topic: read commands, apply them, acknowledge them.

A :class:`ControlListener` is a daemon thread per ``KafkaStreams`` instance with its own
group-less consumer assigned to ``<application_id>-control``, starting at the end offset
captured when it starts (commands issued before an instance starts are not for it). For
each command addressed to this instance it acknowledges ``accepted`` on the status topic,
then:

- ``stop``: closes the instance from a separate thread (close joins the stream threads):
  commit, checkpoint, close stores, leave the group, tombstone the status document.
- ``restart``: the same close, with the command noted on the instance
  (``KafkaStreams.restart_command``): its host (streams/instance/host.py) then starts a new
  incarnation on the same state directory with the next epoch, which answers ``done``.
- ``checkpoint``, ``enforce_retention``, ``compact``: hands an action to every stream
  thread (``StreamThread.run_at_safe_point``), which applies it between two iterations
  of its loop; when every thread is done it acknowledges ``done`` with the per-task
  results, or ``failed`` with ``{"error": ...}``. The instance keeps running either way.

A malformed record is logged with its offset and skipped: control never takes an
instance down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from airflow_stateful_provider.streams.clock import wall_clock_ms
from airflow_stateful_provider.streams.control.commands import (
    ACK_ACCEPTED,
    ACK_DONE,
    ACK_FAILED,
    MAINTENANCE_COMMANDS,
    ControlCommand,
)
from airflow_stateful_provider.streams.errors import AuthorizationError, ControlFormatError, StreamsError
from airflow_stateful_provider.streams.kafka.authorization import missing_acl, refusal_in
from airflow_stateful_provider.streams.processing.task import TaskState
from airflow_stateful_provider.streams.status.document import control_topic_name

__all__ = ["ControlListener", "maintainable_stores"]

log = logging.getLogger(__name__)

#: Longest wait of one poll of the control topic (also how long close() may wait for it).
CONTROL_POLL_MS = 200

def maintainable_stores(topology: Any) -> list[str]:
    """Names of the topology's stores that maintenance acts on: those of a maintainable kind
    (session and versioned stores)."""
    return [name for name in topology.store_names if _maintainable(topology.store_builder(name))]


def _maintainable(builder: Any) -> bool:
    """Session and versioned stores, and key-value stores with a time to live."""
    return bool(builder.kind.maintainable or getattr(builder, "time_to_live_ms", None))


def control_read_refused(instance_id: str, topic: str) -> AuthorizationError:
    """The error of an instance whose principal may not Read its control topic."""
    return missing_acl("topic", [topic], "Read", doing=f"instance {instance_id} reading commands on the control topic")


class ControlListener:
    """Reads the control topic for one ``KafkaStreams`` instance in a daemon thread (see
    module docstring).

    ``streams`` needs ``config``, ``instance_id``, ``topology``, ``threads``,
    ``status_publisher``, ``close()`` and ``_new_consumer(**overrides)``.
    """

    def __init__(self, streams: Any, *, clock: Callable[[], int] = wall_clock_ms) -> None:
        self._streams = streams
        self._clock = clock
        self.application_id = streams.config.application_id
        self.instance_id = streams.instance_id
        self.topic = control_topic_name(self.application_id)
        self._stopping = threading.Event()
        self._consumer: Any = None
        self._stopper: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        #: Records of the fetch start() made, applied first.
        self._first: dict[Any, Any] = {}

    def start(self, *, check_read: bool = True) -> None:
        """Assign the control topic at its current end, then start reading. The end is
        captured before this returns, so a command sent afterwards is seen. ``check_read``:
        fetch once first, so that a principal refused Read fails here (CONTROL_POLL_MS of
        waiting: the instance skips it when the brokers already said Read is allowed)."""
        from kafka import TopicPartition as KafkaTopicPartition

        consumer = self._streams._new_consumer(
            group_id=None, enable_auto_commit=False, auto_offset_reset="latest",
            client_id=f"{self._streams.client_id}-control-listener")
        try:
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                raise StreamsError(f"control topic {self.topic!r} does not exist (it is created at instance start)")
            tps = [KafkaTopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            for tp, end in consumer.end_offsets(tps).items():
                consumer.seek(tp, end)
            if check_read:  # one fetch now: a principal that may not Read the topic fails the start, not the loop
                self._first = consumer.poll(timeout_ms=CONTROL_POLL_MS)
        except BaseException as exc:
            consumer.close()
            if isinstance(exc, Exception) and refusal_in(exc) is not None:
                raise control_read_refused(self.instance_id, self.topic) from None
            raise
        self._consumer = consumer
        self._thread = threading.Thread(target=self._run, name=f"{self.instance_id}-control-listener", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop reading and close the consumer (the thread closes it on its way out)."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning("control listener of %s did not stop within %.0f s", self.instance_id, timeout)

    # ------------------------------------------------------------------ reading

    def _run(self) -> None:
        consumer = self._consumer
        try:
            while not self._stopping.is_set():
                try:
                    fetched, self._first = self._first or consumer.poll(timeout_ms=CONTROL_POLL_MS), {}
                except Exception:  # control must never take the instance down
                    log.exception("control listener of %s: polling %s failed; retrying", self.instance_id, self.topic)
                    self._stopping.wait(1.0)
                    continue
                for records in fetched.values():
                    for record in records:
                        if self._stopping.is_set():
                            return
                        try:
                            self._apply_record(record)
                        except Exception:  # a bug here must not end control
                            log.exception("%s offset %d: applying the record failed", self.topic, record.offset)
        finally:
            try:
                consumer.close(autocommit=False)
            except Exception:  # closing anyway
                log.exception("control listener of %s: error closing its consumer", self.instance_id)

    def _apply_record(self, record: Any) -> None:
        try:
            command = ControlCommand.from_json_bytes(record.value)
        except ControlFormatError as exc:
            log.warning("%s offset %d: malformed control record skipped: %s", self.topic, record.offset, exc)
            return
        if command.application_id != self.application_id:
            log.warning("%s offset %d: command %s is for application %r, not %r; ignored", self.topic,
                        record.offset, command.command_id, command.application_id, self.application_id)
            return
        if not command.applies_to(self.instance_id):
            log.info("%s offset %d: command %s is addressed to %s, not %s; ignored", self.topic, record.offset,
                     command.command_id, list(command.instances or ()), self.instance_id)
            return
        log.info("%s offset %d: applying %s %s", self.topic, record.offset, command.command_type, command.command_id)
        self._acknowledge(command, ACK_ACCEPTED, None)
        try:
            if command.command_type in ("stop", "restart"):
                self._stop_instance(command)
            else:
                self._dispatch(command)
        except Exception as exc:  # answered "failed"; the instance runs on
            if isinstance(exc, StreamsError):  # a bad request (e.g. unknown store), not a bug
                log.warning("command %s failed: %s", command.command_id, exc)
            else:
                log.exception("command %s failed", command.command_id)
            self._acknowledge(command, ACK_FAILED, {"error": f"{type(exc).__name__}: {exc}"})

    def _acknowledge(self, command: ControlCommand, status: str, result: Any) -> None:
        publisher = self._streams.status_publisher
        if publisher is not None:
            publisher.acknowledge(command.command_id, status, result)

    # ------------------------------------------------------------------ commands

    def _stop_instance(self, command: ControlCommand) -> None:
        """Close the instance from another thread: close() joins the stream threads and
        this listener, so it cannot run here. The tombstone is the answer to a stop; a restart
        is noted first (only when no stop is under way: a stop wins)."""
        if self._stopper is not None:
            return
        if command.command_type == "restart":
            self._streams.restart_command = command
        self._stopper = threading.Thread(target=self._streams.close, name=f"{self.instance_id}-control-stop")
        self._stopper.start()

    def _dispatch(self, command: ControlCommand) -> None:
        if command.command_type in MAINTENANCE_COMMANDS:
            known = maintainable_stores(self._streams.topology)
            unknown = [s for s in command.stores or () if s not in known]
            if unknown:
                raise StreamsError(f"unknown store(s) {unknown}: the stores of instance {self.instance_id} that "
                                   f"retention and compaction act on (session and versioned stores, key-value "
                                   f"stores with a time to live) are {known}")
            now_ms = command.now_ms if command.now_ms is not None else self._clock()
            action: Callable[[Any], Any] = lambda thread: _maintain(thread, command, now_ms)  # noqa: E731
        else:
            action = _checkpoint
        futures = [thread.run_at_safe_point(action) for thread in list(self._streams.threads)]
        _when_all_done(futures, lambda done: self._answer(command, done))

    def _answer(self, command: ControlCommand, futures: Sequence[Future]) -> None:
        errors = [f"{type(f.exception()).__name__}: {f.exception()}" for f in futures if f.exception() is not None]
        if errors:
            self._acknowledge(command, ACK_FAILED, {"error": "; ".join(errors)})
            return
        rows = [row for f in futures for row in f.result()]
        key = "tasks" if command.command_type == "checkpoint" else "stores"
        self._acknowledge(command, ACK_DONE, {key: rows})
        log.info("command %s done: %d %s", command.command_id, len(rows), key)


def _when_all_done(futures: Sequence[Future], callback: Callable[[Sequence[Future]], None]) -> None:
    """``callback(futures)`` once, when the last future is done (at once if there is none)."""
    if not futures:
        callback(futures)
        return
    lock = threading.Lock()
    remaining = [len(futures)]

    def one_done(_: Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            callback(futures)

    for future in futures:
        future.add_done_callback(one_done)


# ---------------------------------------------------------------------------- in the stream thread


def _holders(thread: Any) -> list[tuple[Any, str]]:
    """The open tasks of a stream thread with their role, by task id."""
    held = [(task, "active") for task in list(thread.tasks.values()) if task.state is not TaskState.CLOSED]
    held += [(standby, "warmup" if standby.warmup else "standby")
             for standby in list(thread.standby_tasks.values()) if standby.state is not TaskState.CLOSED]
    return sorted(held, key=lambda h: h[0].id)


def _checkpoint(thread: Any) -> list[str]:
    """Commit every running active task with an enforced checkpoint; checkpoint every
    standby. Restoring tasks are skipped (they checkpoint when their restoration ends)."""
    running = [t for t in thread.tasks.values() if t.state is TaskState.RUNNING]
    if thread.commit(running, enforce_checkpoint=True) is None:
        raise StreamsError(f"{thread.name}: the group refused the commit (rebalancing); send the checkpoint again")
    done = [str(t.id) for t in running]
    for standby in list(thread.standby_tasks.values()):
        if standby.state is not TaskState.CLOSED:
            standby.checkpoint(force=True)
            done.append(str(standby.id))
    return sorted(done)


def _maintain(thread: Any, command: ControlCommand, now_ms: int) -> list[dict[str, Any]]:
    """Retention or compaction on the selected session and versioned stores of every task
    the thread holds, then flush and checkpoint each task touched."""
    rows: list[dict[str, Any]] = []
    for task, role in _holders(thread):
        entries_of = getattr(task.stores, "entries", None)  # a stateless task has no TaskStateManager
        entries = [e for e in (entries_of() if entries_of else []) if _maintainable(e.builder)
                   and (command.stores is None or e.name in command.stores)]
        if not entries:
            continue
        running = role == "active" and task.state is TaskState.RUNNING
        if running:
            task.stores.flush()  # write record caches through first: nothing pending lands after the drop
        for entry in entries:
            rows.append({"task_id": str(task.id), "store": entry.name, "role": role,
                         "result": _apply(task.stores, entry, command.command_type, now_ms, write_cutoff=running)})
        if running:
            if thread.commit([task], enforce_checkpoint=True) is None:
                log.info("%s: checkpoint of %s after %s deferred to the next commit (rebalancing)",
                         thread.name, task.id, command.command_type)
        else:
            # a standby or a restoring active: the local drop is committed state at once (it only
            # applies what the active's marker brings through the changelog anyway); under
            # exactly-once a drop left in the transaction buffer would block the next restore
            task.stores.flush()
            task.stores.commit_transaction()
            task.stores.checkpoint({}, force=True)
    return rows


def _apply(stores: Any, entry: Any, command_type: str, now_ms: int, *, write_cutoff: bool) -> dict[str, Any]:
    """One store's maintenance. Retention of a running active's store also writes the cut-off
    into its changelog (committed right after, by the caller); a standby, a warmup or a
    restoring active only applies it locally (the active's marker reaches them by the changelog)."""
    store = entry.raw
    if command_type == "enforce_retention":
        result: dict[str, Any] = stores.enforce_retention(entry.name, now_ms, write_cutoff=write_cutoff)
        return result
    compact = getattr(store, "compact", None)
    if compact is None:
        return {"skipped": "in-memory store: nothing to compact"}
    return compact().as_dict()
