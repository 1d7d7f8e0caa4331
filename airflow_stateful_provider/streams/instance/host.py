"""Host one instance id in this process, across restarts.

A ``restart`` command on the control topic (docs/control-topic.md) closes the instance as a
stop does: commit, checkpoint, close the stores, leave the group, remove its status
document. The host then builds a new ``KafkaStreams`` for the same instance id and the same
state directory with the next epoch, and starts it: the stores and checkpoints stay on disk,
so the new incarnation restores only what the changelogs gained meanwhile. Once started, it
answers the command ``done`` with its epoch. Without a restart command, the first end of the
instance (a stop command, ERROR) or :meth:`InstanceHost.request_stop` ends :meth:`run`.

Both hosts of instances use it: ``python -m airflow_stateful_provider.streams.runner`` and
the Spark instance job (spark/instance_job.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from airflow_stateful_provider.streams.config import StreamsConfig
from airflow_stateful_provider.streams.control.commands import ACK_DONE
from airflow_stateful_provider.streams.instance.kafka_streams import KafkaStreams, KafkaStreamsState

__all__ = ["InstanceHost"]

log = logging.getLogger(__name__)

_ENDED = (KafkaStreamsState.NOT_RUNNING, KafkaStreamsState.ERROR)
#: The waiting main thread looks for a stop request this often. Python runs signal handlers
#: (SIGTERM's request_stop) in the main thread only, and a main thread blocked in a lock
#: without a timeout is not woken by a signal the kernel delivered to another thread.
WAKE_SECONDS = 1.0


class InstanceHost:
    """Runs the instance ``build(config)`` returns, and its next incarnations (module docstring).

    ``build`` makes a ``KafkaStreams`` from a config (the topology and any listeners); the
    host sets its state listener, so ``build`` must not.
    """

    def __init__(self, build: Callable[[StreamsConfig], KafkaStreams], config: StreamsConfig) -> None:
        self._build = build
        self._config = config
        self._wake = threading.Event()
        self._stop_requested = False
        #: The current incarnation (None before start()).
        self.streams: KafkaStreams | None = None
        #: Restarts done so far.
        self.restarts = 0

    def start(self) -> KafkaStreams:
        """Build and start the first incarnation; raises what ``KafkaStreams.start`` raises."""
        return self._start(self._config)

    def request_stop(self) -> None:
        """End :meth:`run` within WAKE_SECONDS: the current incarnation is closed and not
        restarted (SIGTERM). Only sets a flag, so a signal handler may call it: an
        ``Event.set()`` there could wait forever on the lock the interrupted main thread holds."""
        self._stop_requested = True

    def run(self) -> KafkaStreams:
        """Block until the instance ends for good; returns the last incarnation, closed."""
        while True:
            woken = self._wake.wait(WAKE_SECONDS)
            streams = self._current()
            if self._stop_requested:
                streams.close()
                return streams
            if not woken:
                continue
            self._wake.clear()
            if streams.state not in _ENDED:
                continue
            streams.close()  # waits until the closing thread is done (its status document removed)
            command = streams.restart_command
            if command is None or streams.state is KafkaStreamsState.ERROR:
                return streams
            epoch = streams.config.instance_epoch + 1
            log.info("instance %s restarting with epoch %d (command %s)", streams.instance_id, epoch,
                     command.command_id)
            restarted = self._start(self._config.with_overrides(instance_epoch=epoch))
            self.restarts += 1
            if restarted.status_publisher is not None:
                restarted.status_publisher.acknowledge(command.command_id, ACK_DONE,
                                                       {"epoch": epoch, "restarts": self.restarts})

    def _current(self) -> KafkaStreams:
        if self.streams is None:
            raise RuntimeError("InstanceHost.run() called before start()")
        return self.streams

    def _start(self, config: StreamsConfig) -> KafkaStreams:
        streams = self._build(config)

        def note_end(new: KafkaStreamsState, old: KafkaStreamsState) -> None:
            if new in _ENDED:
                self._wake.set()

        streams.set_state_listener(note_end)
        self.streams = streams
        streams.start()
        return streams
