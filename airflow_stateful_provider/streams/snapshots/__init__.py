"""Store snapshots on shared storage: bounded cold restore (docs/snapshots.md).

``manifest`` (the format), ``storage`` (fsspec: list, upload, download, delete),
``taking`` (local RocksDB checkpoint after a commit, upload off the stream thread),
``loading`` (newest valid snapshot into a task directory), ``retention`` (keep K per task).
Sits on ``state/`` only: it copies store directories and knows nothing of Kafka clients.
"""
