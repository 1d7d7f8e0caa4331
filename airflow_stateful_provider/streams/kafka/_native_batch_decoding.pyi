"""The C loop of batch_decoding.py (_native_batch_decoding.c)."""

from typing import Any

def decode_records(buffer: Any, pos: int, count: int, topic: str, partition: int, leader_epoch: int,
                   base_offset: int, first_timestamp: int, max_timestamp: int, timestamp_type: int,
                   record_type: type) -> tuple[list[Any], int] | None: ...
