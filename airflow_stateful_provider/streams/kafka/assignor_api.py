"""kafka-python's interface for partition assignors, which it does not export publicly.

A consumer given ``partition_assignment_strategy=[assignor]`` calls, on its IO thread at
each group join: ``assignor.metadata(topics)`` for this member's subscription (a
``ConsumerProtocolSubscription``), ``assignor.assign(cluster, members)`` on the leader (one
``ConsumerProtocolAssignment`` per member), ``assignor.on_assignment(assignment,
generation)`` on every member, and ``supported_protocols()`` (a list of
``RebalanceProtocol``) to choose eager or cooperative rebalancing. kafka-python's own
assignors derive from ``AbstractPartitionAssignor``; these classes live in its
``kafka.coordinator.assignors`` and ``kafka.protocol`` modules, checked against
kafka-python 3.0.12. The StreamsPartitionAssignor (assignment/) takes them from here.
"""

from __future__ import annotations

from kafka.coordinator.assignors.abstract import AbstractPartitionAssignor, RebalanceProtocol
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = ["AbstractPartitionAssignor", "ConsumerProtocolAssignment", "ConsumerProtocolSubscription",
           "RebalanceProtocol"]
