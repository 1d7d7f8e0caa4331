"""The control topic: commands to running instances (``commands``), the instance side that
applies them (``listener``) and the operator side that sends them and waits (``channel``)."""
