"""is_group_member: which group metadata a transaction's offsets may be committed with."""

from __future__ import annotations

import pytest
from kafka import ConsumerGroupMetadata

from airflow_stateful_provider.streams.processing.streams_producer import is_group_member


@pytest.mark.parametrize(("metadata", "member"), [
    (ConsumerGroupMetadata("app", 3, "member-1"), True),
    (ConsumerGroupMetadata("app", 0, "member-1"), True),  # the first generation
    # kafka-python 3.0.12 after a heartbeat answered UNKNOWN_MEMBER_ID: nothing left to fence by
    (ConsumerGroupMetadata("app", -1, ""), False),
    # ... after ILLEGAL_GENERATION: the member id is kept, the generation is not
    (ConsumerGroupMetadata("app", -1, "member-1"), False),
    (ConsumerGroupMetadata("app"), False),  # never joined
    ("app", False),  # a bare group id (producers older than KIP-447) carries no generation
])
def test_only_a_member_of_a_generation_commits(metadata, member):
    assert is_group_member(metadata) is member
