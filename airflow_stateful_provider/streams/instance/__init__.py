"""The instance: ``KafkaStreams`` and its stream threads.

An instance joins the consumer group, owns its stream threads (each one a group member
running its assigned active, standby and warmup tasks), the status publisher and the
control listener. Everything that talks to the group lives here.
"""
