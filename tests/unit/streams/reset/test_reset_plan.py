"""The reset plan without a broker: where the offsets go, and the plan as text and JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_stateful_provider.streams.reset.application_reset import internal_topic_names
from airflow_stateful_provider.streams.reset.plan import (
    OffsetChange,
    OffsetTarget,
    ResetPlan,
    offset_target,
    parse_duration,
)

NOW_MS = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC


@pytest.mark.parametrize(("given", "expected"), [
    ("PT1H", timedelta(hours=1)), ("P1DT12H", timedelta(days=1, hours=12)), ("PT90S", timedelta(seconds=90)),
    ("pt1.5h", timedelta(hours=1, minutes=30)), (30, timedelta(seconds=30)),
    (timedelta(minutes=5), timedelta(minutes=5)),
])
def test_durations_as_kafkas_reset_tool_takes_them(given, expected):
    assert parse_duration(given) == expected


@pytest.mark.parametrize("bad", ["P", "PT", "P1DT", "1h", "", True, None, -5, "PT0S"])
def test_bad_durations_are_named(bad):
    with pytest.raises(ValueError, match="by_duration must be"):
        parse_duration(bad)


def test_offset_targets():
    assert offset_target(now_ms=NOW_MS) == OffsetTarget(None, "the earliest offset")
    by = offset_target(by_duration="PT1H", now_ms=NOW_MS)
    assert by.timestamp_ms == NOW_MS - 3_600_000 and "2025-12-31 23:00:00 UTC" in by.text
    at = offset_target(to_datetime="2026-01-01T02:00:00+02:00", now_ms=NOW_MS)
    assert at.timestamp_ms == NOW_MS
    assert offset_target(to_datetime=datetime(2026, 1, 1, tzinfo=UTC), now_ms=0).timestamp_ms == NOW_MS
    with pytest.raises(ValueError, match="has no UTC offset"):
        offset_target(to_datetime="2026-01-01T00:00:00", now_ms=NOW_MS)
    with pytest.raises(ValueError, match="not both"):
        offset_target(to_datetime="2026-01-01T00:00:00Z", by_duration=60, now_ms=NOW_MS)


def test_internal_topics_are_the_applications_own():
    topics = {"clicks-status", "clicks-control", "clicks-queries", "clicks-query-answers", "clicks-topology",
              "clicks-counts-changelog", "clicks-KSTREAM-REPARTITION-0000000003-repartition", "clicks-in",
              "clicks-out", "clicks-v2-status", "clicks-v2-control", "clicks-v2-counts-changelog", "other-status"}
    assert internal_topic_names("clicks", topics) == [
        "clicks-KSTREAM-REPARTITION-0000000003-repartition", "clicks-control", "clicks-counts-changelog",
        "clicks-queries", "clicks-query-answers", "clicks-status", "clicks-topology"]


def test_the_plan_says_what_it_would_do_did_or_refused():
    plan = ResetPlan("clicks", OffsetTarget(None, "the earliest offset"),
                     (OffsetChange("clicks-in", 0, 1200, 0), OffsetChange("clicks-in", 1, None, 0)),
                     ("clicks-counts-changelog", "clicks-status"), ("/data/state/clicks",))
    text = plan.text()
    assert text.splitlines()[0] == "reset of application 'clicks': DRY RUN, nothing changed (add --execute to carry " \
                                   "it out)"
    assert "input offsets of consumer group 'clicks' to set to the earliest offset:" in text
    assert [line.split() for line in text.splitlines()[2:5]] == [
        ["TOPIC", "PARTITION", "CURRENT", "NEW"], ["clicks-in", "0", "1200", "0"], ["clicks-in", "1", "-", "0"]]
    assert "internal topics to delete (2):\n  clicks-counts-changelog\n  clicks-status" in text
    assert "local state to remove:\n  /data/state/clicks" in text
    done = ResetPlan(**{**plan.__dict__, "executed": True}).text()
    assert done.startswith("reset of application 'clicks': done") and "internal topics deleted (2)" in done
    refused = ResetPlan(**{**plan.__dict__, "refusals": ("live instance(s) ...",)})
    assert refused.refused and refused.text().startswith("REFUSED: reset of application 'clicks'")
    assert refused.to_json_dict()["refused"] == ["live instance(s) ..."]
