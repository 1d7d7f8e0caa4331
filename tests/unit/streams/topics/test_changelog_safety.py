"""unsafe_changelog_settings: which configs of an existing changelog lose the store's data."""

from __future__ import annotations

import pytest

from airflow_stateful_provider.streams.topics.changelog_safety import unsafe_changelog_settings
from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic

KEY_VALUE = InternalTopic("app-counts-changelog", 2, {"cleanup.policy": "compact",
                                                     "message.timestamp.type": "CreateTime"}, "changelog", 0, "counts")
SESSION = InternalTopic("app-sessions-changelog", 2, {"cleanup.policy": "compact,delete", "retention.ms": "86700000",
                                                     "message.timestamp.type": "CreateTime"}, "changelog", 0,
                        "sessions")


def keys(topic, **actual):
    return [(u.key, u.actual, u.repair) for u in unsafe_changelog_settings(
        topic, {k.replace("_", "."): v for k, v in actual.items()})]


def test_delete_with_a_short_retention_on_a_key_value_changelog_names_both_settings():
    assert keys(KEY_VALUE, cleanup_policy="delete", retention_ms="1000") == [
        ("cleanup.policy", "delete", "compact"), ("retention.ms", "1000", None)]


@pytest.mark.parametrize("actual", [
    {"cleanup_policy": "compact", "retention_ms": "1000"},  # retention does not apply to compaction alone
    {"cleanup_policy": "compact,delete", "retention_ms": "-1"},
    {"cleanup_policy": "delete,compact", "retention_ms": "-1"},
])
def test_key_value_changelogs_that_keep_every_key(actual):
    assert keys(KEY_VALUE, **actual) == []


def test_compact_delete_with_a_time_limit_loses_a_key_value_stores_old_keys():
    [(key, actual, repair)] = keys(KEY_VALUE, cleanup_policy="compact,delete", retention_ms="604800000")
    assert (key, actual, repair) == ("retention.ms", "604800000", None)


def test_session_changelog_retention_must_cover_the_stores():
    assert keys(SESSION, cleanup_policy="compact,delete", retention_ms="86700000") == []
    assert keys(SESSION, cleanup_policy="compact,delete", retention_ms="90000000") == []
    assert keys(SESSION, cleanup_policy="compact,delete", retention_ms="-1") == []
    assert keys(SESSION, cleanup_policy="compact,delete", retention_ms="3600000") == [
        ("retention.ms", "3600000", "86700000")]
    assert keys(SESSION, cleanup_policy="delete", retention_ms="1000") == [
        ("cleanup.policy", "delete", "compact,delete"), ("retention.ms", "1000", "86700000")]


def test_the_text_names_setting_value_and_reason():
    [policy] = unsafe_changelog_settings(KEY_VALUE, {"cleanup.policy": "delete", "retention.ms": "-1"})
    assert policy.text().startswith("cleanup.policy=delete (not compacted: the broker deletes a key's only record")
