"""Redeploying a changed topology: the description each instance records at start
(``recorded_topology.py``) in ``<application_id>-topology`` (``topology_topic.py``), the plan
comparing a new topology with it (``plan.py``, pure) and making that plan against the brokers
(``planner.py``). docs/redeploying.md."""
