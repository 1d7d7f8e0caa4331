"""TopicWatch: which of the topics the application reads and writes still exist.

A topic deleted while the application runs shows up as errors that look like something
else: sends that wait 60 s for metadata, batches retried until their delivery timeout,
transactions that fail and are rolled back again and again, a group that cannot assign a
source topic. Whenever the stream thread meets such an error (a failed send or
transaction, a flush that takes long, an assignment missing source partitions) it asks
the watch, which lists the topics with one metadata request; a missing topic turns the
error into :class:`MissingTopicError` naming it, and the thread stops instead of looping.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from airflow_stateful_provider.streams.errors import MissingTopicError
from airflow_stateful_provider.streams.instance.thread_admin import ThreadAdmin

__all__ = ["TopicWatch"]

log = logging.getLogger(__name__)


#: What to do about a missing topic, by its role.
_ADVICE = {
    "source": "Recreate the input topic with the partition count it had, then restart the application",
    "sink": "Recreate the output topic with the partition count it had, then restart the application",
    "changelog": "A restart recreates the changelog empty; the stores' state it backed up is lost "
                 "(docs/runbook.md, 'A changelog was lost')",
    "repartition": "A restart recreates the repartition topic; records not yet read from it are lost",
}


class TopicWatch:
    """``roles``: every topic the thread uses and what it is to the application ("source",
    "sink", "changelog", "repartition"). ``admin``: the thread's admin client (it closes it)."""

    def __init__(self, roles: Mapping[str, str], admin: ThreadAdmin, owner: str) -> None:
        self.roles = dict(roles)
        self._admin = admin
        self._owner = owner

    def missing(self, extra: Iterable[str] = ()) -> dict[str, str] | None:
        """The watched topics (and ``extra`` ones) that do not exist, with their roles; None
        when the brokers cannot tell (then the caller goes on as before)."""
        topics = {**self.roles, **{topic: self.roles.get(topic, "sink") for topic in extra}}
        if not topics or not self._admin.available:
            return None
        try:
            existing = set(self._admin.client().list_topics())
        except Exception as exc:  # noqa: BLE001 - the brokers may be what failed; the caller goes on
            log.info("%s: could not list topics to check for missing ones: %r", self._owner, exc)
            return None
        return {topic: role for topic, role in sorted(topics.items()) if topic not in existing}

    def check(self, cause: BaseException | None = None, extra: Iterable[str] = ()) -> None:
        """Raise MissingTopicError (from ``cause``) if a watched topic is missing."""
        missing = self.missing(extra)
        if missing:
            described = ", ".join(f"{role} topic {topic!r}" for topic, role in missing.items())
            advice = "; ".join(sorted({_ADVICE.get(role, _ADVICE["sink"]) for role in missing.values()}))
            error = MissingTopicError(
                f"{self._owner}: {described} does not exist (deleted while the application runs, or never "
                f"created); nothing can be committed without it. {advice}"
                + (f" (seen as: {cause})" if cause is not None else ""), topics=list(missing))
            raise error from cause
