"""The supervisor's restart, epoch and stop logic, with a scripted job runner instead of Spark."""

from __future__ import annotations

import threading

import pytest

from airflow_stateful_provider.spark.instance_job import InstanceSpec, instance_state_dir
from airflow_stateful_provider.spark.restart_policy import CrashLoopError, RestartPolicy, RestartTracker
from airflow_stateful_provider.spark.supervisor import Supervisor, error_summary
from tools.waits import wait_until

FAST = RestartPolicy(initial_backoff_s=0.01, max_backoff_s=0.05, max_failures=3, failure_window_s=60)


class ScriptedRunner:
    """Each instance's jobs follow a script: "fail:<msg>", "stop" (returns), or "block"
    (runs until released by a stop sent to it, or cancelled)."""

    def __init__(self, scripts: dict[str, list[str]], *, ignore_stop: bool = False,
                 after: dict[str, str] | None = None) -> None:
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.ignore_stop = ignore_stop
        self.calls: list[tuple[str, int, str]] = []
        self.cancelled: list[str] = []
        self._release: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        #: instance -> the instance whose first job must have started before its jobs run
        self._after = after or {}
        self._started: dict[str, threading.Event] = {i: threading.Event() for i in scripts}

    def run(self, spec: InstanceSpec, group: str, description: str):
        self._started[spec.instance_id].set()
        waits_for = self._after.get(spec.instance_id)
        if waits_for is not None:
            assert self._started[waits_for].wait(120), f"{waits_for} never started"
        with self._lock:
            self.calls.append((spec.instance_id, spec.epoch, description))
            step = self.scripts[spec.instance_id].pop(0) if self.scripts[spec.instance_id] else "block"
            release = self._release.setdefault(group, threading.Event())
        if step.startswith("fail:"):
            raise RuntimeError(step[5:])
        if step == "block":
            release.wait(10)
            if group in self.cancelled:
                raise RuntimeError("Job group cancelled")
        return {"instance_id": spec.instance_id, "epoch": spec.epoch, "state": "NOT_RUNNING"}

    def stop(self, instances) -> None:
        if self.ignore_stop:
            return
        with self._lock:
            for group, event in self._release.items():
                if instances is None or any(group.startswith(i + "-epoch-") for i in instances):
                    event.set()

    def cancel(self, group: str) -> None:
        self.cancelled.append(group)
        self._release.setdefault(group, threading.Event()).set()


def supervisor(runner: ScriptedRunner, instances: int = 2, **kwargs) -> tuple[Supervisor, list[dict]]:
    events: list[dict] = []
    sup = Supervisor(application_id="app", topology="m:f", config_values={"application_id": "app"},
                     instances=instances, runner=runner, send_stop=runner.stop, emit=events.append,
                     **{"policy": FAST, **kwargs})
    return sup, events


def run_in_background(sup: Supervisor) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(sup.run()), daemon=True)
    thread.start()
    return thread, codes


def wait_for(predicate, what: str = "the supervisor's threads to get there") -> None:
    wait_until(predicate, 5, what, interval=0.01)


def kinds(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def test_failed_instance_restarts_with_higher_epoch_and_others_keep_running():
    runner = ScriptedRunner({"app-0": ["fail:boom", "block"], "app-1": ["block"]})
    sup, events = supervisor(runner)
    thread, codes = run_in_background(sup)
    wait_for(lambda: len(runner.calls) == 3)
    calls = sorted(runner.calls)
    assert [(i, e) for i, e, _ in calls] == [("app-0", 1), ("app-0", 2), ("app-1", 1)]
    assert "instance app-0, epoch 2" in [d for i, e, d in calls if e == 2][0]
    restart = kinds(events, "instance_restarting")[0]
    assert restart["instance_id"] == "app-0" and restart["epoch"] == 2 and restart["backoff_s"] == pytest.approx(0.01)
    assert kinds(events, "instance_failed")[0]["error"] == "RuntimeError: boom"
    sup.request_stop("test")
    thread.join(5)
    assert codes == [0]
    assert {e["instance_id"] for e in kinds(events, "instance_stopped")} == {"app-0", "app-1"}


def test_epochs_step_over_spark_task_attempts_and_the_status_topic():
    runner = ScriptedRunner({"app-0": ["fail:a", "fail:b", "block"]})
    seen = {"app-0": 9}
    sup, _ = supervisor(runner, instances=1, epoch_stride=4, initial_epochs={"app-0": 3},
                        latest_epochs=lambda: seen,
                        policy=RestartPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, max_failures=5))
    thread, codes = run_in_background(sup)
    wait_for(lambda: len(runner.calls) == 3)
    # 3 -> max(3 + 4, 9 + 1) = 10 -> max(10 + 4, 9 + 1) = 14
    assert [e for _, e, _ in runner.calls] == [3, 10, 14]
    sup.request_stop("test")
    thread.join(5)
    assert codes == [0]


def test_crash_loop_stops_the_others_and_reports_the_last_error():
    # app-0 fails only once app-1 runs: a crash loop before app-1 started would stop it before
    # it ever ran (no instance_stopped to see; the supervisor's threads start in any order)
    runner = ScriptedRunner({"app-0": ["fail:one", "fail:two", "fail:three"], "app-1": ["block"]},
                            after={"app-0": "app-1"})
    sup, events = supervisor(runner)
    assert sup.run() == 1
    finished = kinds(events, "supervisor_finished")[0]
    assert "failed 3 times" in finished["error"] and "RuntimeError: three" in finished["error"]
    assert kinds(events, "stop_requested")[0]["reason"] == "crash loop of app-0"
    assert kinds(events, "instance_stopped")[0]["instance_id"] == "app-1"
    assert len([c for c in runner.calls if c[0] == "app-0"]) == 3


def test_stop_is_resent_to_instances_still_running_then_they_are_cancelled():
    runner = ScriptedRunner({"app-0": ["block"]}, ignore_stop=True)
    sent: list = []
    sup, events = supervisor(runner, instances=1, stop_timeout_s=0.6, resend_stop_s=0.2)
    sup._send_stop = sent.append
    thread, codes = run_in_background(sup)
    wait_for(lambda: runner.calls)
    sup.request_stop("SIGTERM")
    thread.join(5)
    assert codes == [1]
    assert sent[0] is None and ("app-0",) in sent[1:]
    assert runner.cancelled == ["app-0-epoch-1"]
    assert kinds(events, "instance_cancelled")[0]["instance_id"] == "app-0"
    assert kinds(events, "supervisor_finished")[0]["cancelled"] == ["app-0"]


def test_an_instance_stopped_on_its_own_is_not_restarted_and_the_rest_go_on():
    runner = ScriptedRunner({"app-0": ["block"], "app-1": ["block"]})
    sup, events = supervisor(runner)
    thread, codes = run_in_background(sup)
    wait_for(lambda: len(runner.calls) == 2)
    sup.retire("app-0")
    runner.stop(("app-0",))
    wait_for(lambda: kinds(events, "instance_stopped"))
    assert thread.is_alive() and len(runner.calls) == 2
    runner.stop(("app-1",))
    thread.join(5)
    assert codes == [0]


def test_failure_during_stop_is_not_restarted():
    runner = ScriptedRunner({"app-0": ["block"]}, ignore_stop=True)
    sup, events = supervisor(runner, instances=1, stop_timeout_s=0.3, resend_stop_s=10)
    thread, codes = run_in_background(sup)
    wait_for(lambda: runner.calls)
    sup.request_stop("SIGTERM")
    thread.join(5)
    assert len(runner.calls) == 1 and not kinds(events, "instance_restarting")


def test_restart_tracker_backoff_doubles_resets_after_a_quiet_window_and_bounds_crash_loops():
    tracker = RestartTracker("i", RestartPolicy(initial_backoff_s=1, max_backoff_s=5, max_failures=4,
                                                failure_window_s=100))
    assert [tracker.record_failure(t, "e") for t in (0, 1, 2)] == [1, 2, 4]
    assert tracker.record_failure(500, "e") == 1  # quiet for longer than the window
    tracker.record_failure(501, "e")
    tracker.record_failure(502, "e")
    with pytest.raises(CrashLoopError, match="instance i failed 4 times within 100 s.*last error: boom"):
        tracker.record_failure(503, "boom")


@pytest.mark.parametrize("kwargs, message", [
    ({"initial_backoff_s": -1}, "initial_backoff_s must be >= 0, got -1"),
    ({"max_failures": 0}, "max_failures must be >= 1, got 0"),
    ({"initial_backoff_s": 5, "max_backoff_s": 1}, r"max_backoff_s \(1\) must be >= initial_backoff_s \(5\)"),
    ({"failure_window_s": 0}, "failure_window_s must be > 0, got 0"),
])
def test_restart_policy_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RestartPolicy(**kwargs)


def test_error_summary_finds_the_python_exception_inside_a_spark_error():
    text = ("An error occurred while calling o45.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times\n"
            "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/x/worker.py", line 1, in main\n'
            "    raise RuntimeError('instance a-0 epoch 3 ended in ERROR: KeyError(1)')\n"
            "RuntimeError: instance a-0 epoch 3 ended in ERROR: KeyError(1)\n"
            "\n\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n")
    assert error_summary(Exception(text)) == "RuntimeError: instance a-0 epoch 3 ended in ERROR: KeyError(1)"
    assert error_summary(ValueError("first line\nsecond")) == "ValueError: first line"


def test_instance_state_dir_prefers_explicit_then_executor_local_dirs():
    spec = InstanceSpec("m:f", {"application_id": "app"}, "app-1", 1, spark_local_dir="/spark-local")
    assert instance_state_dir(spec, {"SPARK_LOCAL_DIRS": "/d1,/d2"}) == "/d1/stateful-streams/app-1"
    assert instance_state_dir(spec, {"LOCAL_DIRS": "/yarn1,/yarn2"}) == "/yarn1/stateful-streams/app-1"
    assert instance_state_dir(spec, {}) == "/spark-local/stateful-streams/app-1"
    explicit = InstanceSpec("m:f", {"application_id": "app", "state_dir": "/state"}, "app-1", 1)
    assert instance_state_dir(explicit, {"SPARK_LOCAL_DIRS": "/d1"}) == "/state/app-1"


def test_a_signal_is_only_noted_by_the_handler_and_the_run_loop_stops_every_instance():
    runner = ScriptedRunner({"app-0": ["block"], "app-1": ["block"]})
    sent: list = []
    sup, events = supervisor(runner)
    sup._send_stop = sent.append
    thread, codes = run_in_background(sup)
    wait_for(lambda: len(runner.calls) == 2)
    sup.stop_on_signal("SIGTERM")  # what the handler does: no lock, no network
    wait_for(lambda: kinds(events, "stop_requested"))  # the run loop requested the stop
    assert kinds(events, "stop_requested")[0]["reason"] == "SIGTERM" and sent[0] is None
    runner.stop(("app-0", "app-1"))
    thread.join(5)
    assert codes == [0]
