"""Input, store contents and running tasks of ``tests.integration.topologies:configured_counts`` (a count per
key in the store "counts"), as the snapshot tests move its tasks between instances."""

from __future__ import annotations

import os
from collections.abc import Iterator

from airflow_stateful_provider.streams import ApplicationStatus, fetch_application_status, open_store
from tools.kafka.topics import numbered_records
from tools.waits import wait_until

STORE = "counts"


def counts_input(start: int, count: int, keys: int) -> Iterator[tuple[str, str]]:
    """Records ``start`` .. ``start + count - 1``, keyed over ``keys`` keys (``k0000`` ...)."""
    return numbered_records(start, count, keys, key_digits=4)


def store_contents(state_dir: str, app: str, partitions: int) -> dict[int, dict[bytes, bytes]]:
    """Partition -> every row of the counts store of task 0_<partition> under ``state_dir``."""
    found = {}
    for partition in range(partitions):
        with open_store(os.path.join(state_dir, app, f"0_{partition}", STORE), read_only=True) as store:
            found[partition] = dict(store.all())
    return found


def wait_all_tasks_running(bootstrap_servers: str, app: str, partitions: int, instance, what: str) -> ApplicationStatus:
    """Until every one of the ``partitions`` tasks runs, as the status topic shows it;
    ``instance`` (an InstanceProcess) must stay alive meanwhile. Returns that status."""
    last: list[ApplicationStatus] = []

    def running() -> bool:
        instance.check_alive()
        try:
            status = fetch_application_status(bootstrap_servers, app)
        except Exception:  # noqa: BLE001 - no document yet
            return False
        last[:] = [status]
        return len(status.tasks) == partitions and all(t.state == "running" for t in status.tasks)

    wait_until(running, 120, what, lambda: f"{last and last[0].tasks}\n{instance.log_tail()}")
    return last[0]
