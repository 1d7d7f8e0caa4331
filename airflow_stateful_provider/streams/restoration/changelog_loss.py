"""Whether a changelog still holds what a store's checkpoint says the store holds.

A store checkpointed at offset ``c`` holds its changelog partition up to ``c``; reopened, it
restores from ``c + 1`` (its *next offset*; for a standby or a restoration under way, the
reader's position). The changelog holds offsets ``[log start, log end)`` now. Not a loss:

- the next offset inside ``[log start, log end]``: the tail after it is restored;
- the next offset below the log start of a changelog that also deletes by time
  (``compact,delete``: session stores): retention removed records the store's own retention
  had expired. The store is wiped and replays what is left, as Kafka Streams does (its
  TaskCorruptedException);
- exactly-once, the next offset past the last stable offset (which the restore consumer's
  end offsets are, reading committed records only) but not past the log end offset: a
  transaction that began before ``c`` is still open (a zombie's, aborted within the
  transaction timeout, or a commit whose markers are on their way). Not a loss: the tail up
  to the log end is restored once that transaction is settled (changelog_reader.py).

A loss: the next offset past the log end offset (the changelog was deleted and recreated, or
truncated: the store holds records the changelog does not), or below the log start of a
compact-only changelog (records were deleted: replaying the rest would drop every key written
only in between). Kafka Streams, in the first case, finds nothing to restore and keeps the
store, which then silently disagrees with its changelog; in the second it wipes the store.
Here ``on_changelog_loss`` decides: "fail" (default) raises :class:`ChangelogLostError` and
leaves the task directory as it is; "restore_from_changelog" wipes the store and replays what
the changelog holds now. A standby is judged the same way.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

from airflow_stateful_provider.streams.errors import ChangelogLostError

__all__ = ["LostChangelog", "Verdict", "changelog_lost_error", "judge_changelog"]


class Verdict(enum.Enum):
    #: Restore from the next offset (nothing to restore when it is at or past the end).
    RESTORE = "restore"
    #: Retention moved the log start past the next offset: wipe and replay from the log start.
    REPLAY = "replay"
    #: The changelog lost records the store holds.
    LOST = "lost"


def judge_changelog(next_offset: int, log_start: int, log_end: int, *, deletes_by_time: bool,
                    high_watermark: int | None = None) -> Verdict:
    """The verdict for a store at ``next_offset`` on a changelog holding ``[log_start, log_end)``
    (see module docstring). ``high_watermark``: the log end offset counting open transactions,
    when ``log_end`` is the last stable offset (exactly-once)."""
    if next_offset > log_end:
        return Verdict.RESTORE if high_watermark is not None and next_offset <= high_watermark else Verdict.LOST
    if next_offset < log_start:  # a store at offset 0 holds nothing of the changelog: nothing of it is lost
        return Verdict.REPLAY if deletes_by_time or next_offset == 0 else Verdict.LOST
    return Verdict.RESTORE


@dataclasses.dataclass(frozen=True)
class LostChangelog:
    """One changelog partition that lost records its store holds."""

    task_id: str
    role: str  # "active" or "standby"
    store: str
    topic: str
    partition: int
    #: Offset of the last record the store holds (the checkpoint, or the reader's position - 1).
    checkpointed_offset: int
    log_start_offset: int
    log_end_offset: int
    #: The task directory, left as it is (named in the error, not in the status document).
    task_dir: str = ""

    def describe(self) -> str:
        return (f"task {self.task_id} ({self.role}) store {self.store!r} holds {self.topic}-{self.partition} up to "
                f"offset {self.checkpointed_offset}, but that changelog partition now starts at offset "
                f"{self.log_start_offset} and ends at {self.log_end_offset}")

    def to_dict(self) -> dict[str, Any]:
        """The ``tasks[].lost_changelogs[]`` entry of the status document."""
        return {"topic": self.topic, "partition": self.partition, "store": self.store,
                "checkpointed_offset": self.checkpointed_offset, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset}


def changelog_lost_error(lost: Sequence[LostChangelog]) -> ChangelogLostError:
    """The error for ``lost`` changelogs: what was found, what was left as it was, and the ways on."""
    found = "\n".join(f"  {entry.describe()}" for entry in lost)
    dirs = ", ".join(sorted({entry.task_dir for entry in lost}))
    return ChangelogLostError(
        f"changelog lost for {len(lost)} store partition(s): the changelog no longer holds what the store's "
        f"checkpoint says it holds (it was deleted and recreated, or truncated):\n"
        f"{found}\n"
        f"The task was not started and its directory ({dirs}) was left as it is: its stores still hold the state "
        f"as of the checkpoint. To go on from what the changelog holds now (after a deletion, nothing: the state "
        f"starts empty), start once with on_changelog_loss='restore_from_changelog', or move the task directory "
        f"aside on every instance that has it; if the changelog's records can be brought back, bring them back "
        f"and start again. See docs/runbook.md, 'A task's state is lost'.",
        lost=tuple(lost))
