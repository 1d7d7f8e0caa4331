"""InstanceHost (instance/host.py) with fake instances: a restart command starts the next
incarnation with the next epoch on the same config, which answers done; a stop or an end
without a restart ends run()."""

from __future__ import annotations

import threading

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.control.commands import new_command
from airflow_stateful_provider.streams.instance.host import InstanceHost
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreamsState


class FakePublisher:
    def __init__(self) -> None:
        self.acknowledged: list[tuple] = []

    def acknowledge(self, command_id, status, result=None):
        self.acknowledged.append((command_id, status, result))


class FakeStreams:
    def __init__(self, config: StreamsConfig) -> None:
        self.config = config
        self.instance_id = config.instance_id
        self.state = KafkaStreamsState.CREATED
        self.restart_command = None
        self.status_publisher = FakePublisher()
        self.closed = 0
        self._listener = None

    def set_state_listener(self, listener):
        self._listener = listener

    def start(self):
        self.state = KafkaStreamsState.RUNNING

    def end(self, state=KafkaStreamsState.NOT_RUNNING, restart=None):
        self.restart_command = restart
        old, self.state = self.state, state
        self._listener(state, old)

    def close(self, timeout=None):
        self.closed += 1
        if self.state is KafkaStreamsState.RUNNING:
            self.state = KafkaStreamsState.NOT_RUNNING
        return True


def hosted(epoch: int = 3):
    built: list[FakeStreams] = []
    config = StreamsConfig(application_id="app", bootstrap_servers="b:9092", instance_id="app-0",
                           instance_epoch=epoch, state_dir="/tmp/state-of-app-0")

    def build(incarnation: StreamsConfig) -> FakeStreams:
        built.append(FakeStreams(incarnation))
        return built[-1]

    host = InstanceHost(build, config)  # type: ignore[arg-type]
    host.start()
    result: list = []
    runner = threading.Thread(target=lambda: result.append(host.run()), daemon=True)
    runner.start()
    return host, built, runner, result


def wait_for(condition, what):
    for _ in range(200):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError(what)


def test_a_restart_starts_the_next_epoch_on_the_same_state_dir_which_answers_done():
    host, built, runner, result = hosted(epoch=3)
    command = new_command("app", "restart", instances=["app-0"], command_id="r-1")
    built[0].end(restart=command)
    wait_for(lambda: len(built) == 2, "the second incarnation")
    second = built[1]
    wait_for(lambda: second.status_publisher.acknowledged, "its answer")
    assert (second.config.instance_epoch, second.config.state_dir, second.config.instance_id) == \
        (4, "/tmp/state-of-app-0", "app-0")
    assert second.state is KafkaStreamsState.RUNNING and host.restarts == 1
    assert second.status_publisher.acknowledged == [("r-1", "done", {"epoch": 4, "restarts": 1})]
    second.end()  # a stop command: no restart
    runner.join(5)
    assert result == [second] and len(built) == 2


def test_an_error_is_not_restarted_even_after_a_restart_command():
    host, built, runner, result = hosted()
    built[0].end(KafkaStreamsState.ERROR, restart=new_command("app", "restart", command_id="r-2"))
    runner.join(5)
    assert result == [built[0]] and len(built) == 1


def test_request_stop_closes_the_running_incarnation():
    host, built, runner, result = hosted()
    host.request_stop()
    runner.join(5)
    assert result == [built[0]] and built[0].closed == 1 and built[0].state is KafkaStreamsState.NOT_RUNNING


def test_a_stop_signal_the_kernel_hands_to_another_thread_still_stops_the_main_thread():
    """Python runs signal handlers in the main thread only; a SIGTERM delivered to another
    thread (the kernel may pick any thread of the process) must not wait for an unrelated wake."""
    import signal

    built: list[FakeStreams] = []
    config = StreamsConfig(application_id="app", bootstrap_servers="b:9092", instance_id="app-0",
                           state_dir="/tmp/state-of-app-0")
    host = InstanceHost(lambda c: built.append(FakeStreams(c)) or built[-1], config)  # type: ignore[arg-type]
    host.start()
    woken_by_watchdog = threading.Event()

    def deliver_to_this_thread() -> None:
        threading.Event().wait(0.5)  # the main thread is waiting in run() by now
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)  # the C handler runs here, not in main

    def watchdog() -> None:  # ends run() if the signal never reaches its handler
        if not stopped.wait(30):
            woken_by_watchdog.set()
            host.request_stop()

    stopped = threading.Event()
    previous = signal.signal(signal.SIGUSR2, lambda *_: host.request_stop())
    try:
        threading.Thread(target=watchdog, daemon=True).start()
        threading.Thread(target=deliver_to_this_thread, daemon=True).start()
        result = host.run()  # the main thread, as in the runner
        stopped.set()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert not woken_by_watchdog.is_set(), "the signal's handler never ran: run() waited without waking"
    assert result is built[0] and built[0].closed == 1
