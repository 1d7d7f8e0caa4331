"""The application reset tool (``stateful-streams reset``, ResetApplicationOperator): a plan of
what starting over means (``plan.py``, pure) and carrying it out on the brokers and the disk
(``application_reset.py``). docs/runbook.md, "Reset an application"."""
