"""Restoration and standbys: replaying changelogs into a task's stores.

``changelog_reader`` restores active tasks and keeps standby tasks (``standby_task``) up to
date from the same changelog consumer; both report progress to listeners, and ``stalls``
reports an active restoration that stands still.
"""
