"""The driver-side supervisor: one long-running Spark job per streams instance.

For each instance slot ``<application_id>-<i>`` a driver thread submits one ordinary
(non-barrier) Spark job of a single task running :func:`.instance_job.run_instance`,
under its own job group with a readable description. Separate jobs fail alone: a barrier
job would abort every instance when one fails.

- A job that returns means its instance was stopped through the control topic; the slot
  is done and not restarted.
- A job that fails is resubmitted after a backoff with a higher epoch (RestartPolicy); the
  consumer group moves the instance's tasks to the others meanwhile. A crash loop stops
  the application and reports the last error.
- Stop (SIGTERM to the driver, or a stop command on the control topic) is a stop command
  to every instance; the supervisor re-sends it to instances still running after
  ``resend_stop_s`` (one may have been starting when it was sent) and waits up to
  ``stop_timeout_s``. Only then does it cancel the remaining jobs, and says so: job
  cancellation kills Python workers without running their cleanup.

The Spark specifics are behind :class:`JobRunner`, so the restart and stop logic is tested
without Spark.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from airflow_stateful_provider.spark.instance_job import InstanceSpec
from airflow_stateful_provider.spark.restart_policy import CrashLoopError, RestartPolicy, RestartTracker

__all__ = ["JobRunner", "Supervisor", "SupervisorEvent", "error_summary"]

log = logging.getLogger(__name__)

#: ``emit(event)`` receives every lifecycle event (the app prints them as JSON lines).
SupervisorEvent = dict


class JobRunner(Protocol):
    """Runs instance jobs; ``run`` blocks until the job ends and raises when it failed."""

    def run(self, spec: InstanceSpec, group: str, description: str) -> Mapping[str, Any]: ...

    def cancel(self, group: str) -> None: ...


@dataclasses.dataclass
class _Slot:
    instance_id: str
    tracker: RestartTracker
    epoch: int
    group: str = ""
    running: bool = False
    retired: bool = False
    result: Mapping[str, Any] | None = None
    last_error: str | None = None
    thread: threading.Thread | None = None

    def started_thread(self) -> threading.Thread:
        """The thread supervising this slot (every slot has one once run() started them)."""
        if self.thread is None:
            raise RuntimeError(f"instance {self.instance_id}: its supervising thread was not started")
        return self.thread


class Supervisor:
    """Keeps ``instances`` streams instances running until told to stop (module docstring)."""

    def __init__(
        self,
        *,
        application_id: str,
        topology: str,
        config_values: Mapping[str, Any],
        instances: int,
        runner: JobRunner,
        send_stop: Callable[[tuple[str, ...] | None], None],
        policy: RestartPolicy = RestartPolicy(),
        initial_epochs: Mapping[str, int] | None = None,
        latest_epochs: Callable[[], Mapping[str, int]] = dict,
        epoch_stride: int = 1,
        spark_local_dir: str | None = None,
        log_level: str = "INFO",
        stop_timeout_s: float = 120.0,
        resend_stop_s: float = 20.0,
        emit: Callable[[SupervisorEvent], None] = lambda event: None,
        thread_factory: Callable[..., threading.Thread] = threading.Thread,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if instances < 1:
            raise ValueError(f"instances must be >= 1, got {instances!r}")
        if epoch_stride < 1:
            raise ValueError(f"epoch_stride must be >= 1, got {epoch_stride!r}")
        self.application_id = application_id
        self.topology = topology
        self.config_values = dict(config_values)
        self.runner = runner
        self.policy = policy
        self.epoch_stride = epoch_stride
        self.spark_local_dir = spark_local_dir
        self.log_level = log_level
        self.stop_timeout_s = stop_timeout_s
        self.resend_stop_s = resend_stop_s
        self._send_stop = send_stop
        self._latest_epochs = latest_epochs
        self._emit = emit
        self._thread_factory = thread_factory
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stop_reason: str | None = None
        #: Set by :meth:`stop_on_signal`; :meth:`run`'s loop turns it into :meth:`request_stop`.
        self._signalled: str | None = None
        self._crash_loop: CrashLoopError | None = None
        epochs = initial_epochs or {}
        self.slots = [
            _Slot(instance_id, RestartTracker(instance_id, policy), epochs.get(instance_id, 1))
            for instance_id in (f"{application_id}-{i}" for i in range(instances))
        ]

    # ------------------------------------------------------------------ control

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def request_stop(self, reason: str, *, send: bool = True) -> None:
        """Stop every instance: send (unless the stop came from the control topic itself,
        which the instances read too) a stop command, and restart nothing any more."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stop_reason = reason
            self._stopping.set()
        self._event("stop_requested", reason=reason)
        if send:
            self._send_stop_safely(None)

    def stop_on_signal(self, name: str) -> None:
        """For a signal handler (SIGTERM, SIGINT): only notes the signal; :meth:`run` requests
        the stop within half a second. A handler interrupts the main thread anywhere, also while
        it holds a lock that :meth:`request_stop` takes, and it must not send on the network."""
        self._signalled = name

    def retire(self, instance_id: str) -> None:
        """The instance was told to stop on its own (a stop command addressed to it): do not
        restart it when its job ends."""
        for slot in self.slots:
            if slot.instance_id == instance_id and not slot.retired:
                slot.retired = True
                self._event("instance_retiring", instance_id=instance_id)

    def _send_stop_safely(self, instances: tuple[str, ...] | None) -> None:
        try:
            self._send_stop(instances)
        except Exception as exc:  # reported; the re-send and the timeout remain
            log.exception("sending the stop command failed")
            self._event("stop_not_sent", instances=list(instances) if instances else None, error=repr(exc))

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        """Start every slot and wait until all ended. Exit code: 0 after a clean stop of
        every instance; 1 after a crash loop or when instances had to be cancelled."""
        self._event("supervisor_started", instances=[s.instance_id for s in self.slots],
                    epochs={s.instance_id: s.epoch for s in self.slots})
        for slot in self.slots:
            slot.thread = self._thread_factory(target=self._supervise, args=(slot,), daemon=True,
                                               name=f"supervise-{slot.instance_id}")
            slot.thread.start()
        while any(s.started_thread().is_alive() for s in self.slots) and not self._stopping.is_set():
            self._stopping.wait(0.5)
            if self._signalled is not None:
                self.request_stop(self._signalled)
        cancelled = self._await_stop() if any(s.started_thread().is_alive() for s in self.slots) else []
        code = 0 if self._crash_loop is None and not cancelled else 1
        self._event("supervisor_finished", exit_code=code, reason=self._stop_reason,
                    error=str(self._crash_loop) if self._crash_loop else None, cancelled=cancelled,
                    instances={s.instance_id: dict(s.result) if s.result else None for s in self.slots})
        return code

    def _await_stop(self) -> list[str]:
        """After a stop request: wait for the instances, re-sending the stop to the ones
        still running; cancel what is left at the timeout."""
        deadline = self._clock() + self.stop_timeout_s
        next_resend = self._clock() + self.resend_stop_s
        while any(s.started_thread().is_alive() for s in self.slots):
            now = self._clock()
            if now >= deadline:
                break
            if now >= next_resend:
                still = tuple(s.instance_id for s in self.slots if s.running)
                if still:
                    self._event("stop_resent", instances=list(still))
                    self._send_stop_safely(still)
                next_resend = now + self.resend_stop_s
            for slot in self.slots:
                slot.started_thread().join(timeout=min(0.5, max(0.0, deadline - self._clock())))
                if slot.started_thread().is_alive():
                    break
        left = [s for s in self.slots if s.started_thread().is_alive()]
        for slot in left:
            self._event("instance_cancelled", instance_id=slot.instance_id, epoch=slot.epoch,
                        why=f"did not stop within {self.stop_timeout_s:g} s; its job is cancelled, so its "
                            f"Python worker ends without cleanup (the next start restores from the changelog)")
            self.runner.cancel(slot.group)
        for slot in left:
            slot.started_thread().join(timeout=30)
        return [s.instance_id for s in left]

    def _supervise(self, slot: _Slot) -> None:
        while not self._stopping.is_set() and not slot.retired:
            slot.group = f"{slot.instance_id}-epoch-{slot.epoch}"
            description = f"stateful-streams {self.application_id}: instance {slot.instance_id}, epoch {slot.epoch}"
            spec = InstanceSpec(self.topology, self.config_values, slot.instance_id, slot.epoch,
                                spark_local_dir=self.spark_local_dir, log_level=self.log_level)
            self._event("instance_started", instance_id=slot.instance_id, epoch=slot.epoch, job_group=slot.group)
            slot.running = True
            try:
                slot.result = self.runner.run(spec, slot.group, description)
            except Exception as exc:  # noqa: BLE001 - any job failure is handled the same way
                slot.running = False
                slot.last_error = error_summary(exc)
                self._event("instance_failed", instance_id=slot.instance_id, epoch=slot.epoch, error=slot.last_error)
                if self._stopping.is_set() or slot.retired:
                    return
                try:
                    backoff = slot.tracker.record_failure(self._clock(), slot.last_error)
                except CrashLoopError as crash:
                    self._crash_loop = crash
                    self._event("crash_loop", instance_id=slot.instance_id, error=str(crash))
                    self.request_stop(f"crash loop of {slot.instance_id}")
                    return
                slot.epoch = self._next_epoch(slot)
                self._event("instance_restarting", instance_id=slot.instance_id, epoch=slot.epoch,
                            backoff_s=backoff, failures=slot.tracker.total_failures)
                if self._stopping.wait(backoff):
                    return
                continue
            slot.running = False
            slot.retired = True
            self._event("instance_stopped", instance_id=slot.instance_id, epoch=slot.epoch, result=dict(slot.result))

    def _next_epoch(self, slot: _Slot) -> int:
        """Past every epoch Spark's own task attempts may have used, and past any epoch the
        status topic shows for this id (an instance refuses to start below it)."""
        candidate = slot.epoch + self.epoch_stride
        try:
            seen = self._latest_epochs().get(slot.instance_id)
        except Exception:  # the stride alone keeps epochs increasing
            log.warning("could not read the latest epochs from the status topic", exc_info=True)
            seen = None
        return max(candidate, seen + 1) if seen is not None else candidate

    def _event(self, kind: str, **fields: Any) -> None:
        event = {"event": kind, "application_id": self.application_id, "at_ms": time.time_ns() // 1_000_000, **fields}
        log.info("%s %s", kind, {k: v for k, v in fields.items() if k != "instances"})
        try:
            self._emit(event)
        except Exception:  # reporting must not stop supervision
            log.exception("emitting supervisor event %s failed", kind)


_PYTHON_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$")


def error_summary(exc: BaseException, limit: int = 1000) -> str:
    """The useful line of a failed job: the Python exception raised in the instance task
    (found in Spark's wrapped traceback), else the first line of the error."""
    text = str(exc)
    traceback_at = text.find("Traceback (most recent call last):")
    if traceback_at >= 0:
        lines = []
        for line in text[traceback_at:].splitlines()[1:]:
            if line.startswith("\tat ") or line.startswith("\n"):
                break
            if _PYTHON_ERROR_LINE.match(line):
                lines.append(line)
        if lines:
            return lines[-1][:limit]
    first = next((line for line in text.splitlines() if line.strip()), type(exc).__name__)
    return f"{type(exc).__name__}: {first}"[:limit]
