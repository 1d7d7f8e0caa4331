"""Daily store maintenance of a stateful application: retention, compaction, changelog configs.

1. ``enforce_retention`` drops the expired segments of every session and versioned store, and
   the expired keys of key-value stores with a time to live, as of the wall clock (or the
   ``now`` param), including stores whose stream time stalled (keys or partitions that went
   quiet keep their disk otherwise); the cut-off goes into each changelog, so restored
   copies agree (docs/maintenance.md, "The cut-off").
2. ``compact`` rewrites the RocksDB files so the space of dropped and overwritten rows
   returns to the disk.
3. ``check_changelog_configs`` compares the internal topics' configs with what the topology
   needs (docs/semantics.md §7) and, with ``repair``, fixes the drift (dry run by default).

Each task logs a per-store (per-topic) table and pushes the results to XCom. Online (the
default), the instances apply retention and compaction themselves through the control
topic; offline, the tasks open the stores under ``state_dir`` of a *stopped* instance (run
once per instance, on its machine). See docs/maintenance.md.

Parameters: ``application_id``, ``mode`` (online/offline), ``state_dir`` (offline only),
``now`` (null: the wall clock; epoch ms or ISO-8601), ``stores`` (null: every session and
versioned store and key-value store with a TTL), ``topology`` and ``streams_config``
(for an exact changelog check; empty: inferred), ``repair``, ``write_cutoff`` (offline: also
write the retention cut-off into the changelogs, docs/maintenance.md).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_stateful_provider.operators.maintenance import (
    ChangelogConfigOperator,
    StoreCompactionOperator,
    StoreRetentionOperator,
)

with DAG(
    dag_id="store_maintenance",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["stateful-streams"],
    render_template_as_native_obj=True,  # stores, streams_config and repair keep their types
    params={
        "application_id": Param("clicks", type="string", minLength=1),
        "mode": Param("online", type="string", enum=["online", "offline"]),
        "state_dir": Param("", type="string", description="offline only: the stopped instance's state_dir"),
        "stores": Param(None, type=["null", "array"], items={"type": "string"}),
        "now": Param(None, type=["null", "integer", "string"],
                     description="retention as of this time (epoch ms or ISO-8601); null: the wall clock"),
        "topology": Param("", type="string", description="package.module:function; empty: inferred check"),
        "streams_config": Param({}, type="object", description="StreamsConfig values the topology reads"),
        "repair": Param(False, type="boolean"),
        "write_cutoff": Param(False, type="boolean",
                              description="offline only: also write the cut-off markers into the changelogs"),
    },
    doc_md=__doc__,
) as dag:
    common = {
        "application_id": "{{ params.application_id }}",
        "mode": "{{ params.mode }}",
        "state_dir": "{{ params.state_dir if params.mode == 'offline' else '' }}",
        "stores": "{{ params.stores }}",
        "timeout": timedelta(minutes=10),
    }
    retention = StoreRetentionOperator(task_id="enforce_retention", now="{{ params.now }}",
                                       write_cutoff="{{ params.write_cutoff }}", **common)
    compaction = StoreCompactionOperator(task_id="compact", **common)
    changelog_configs = ChangelogConfigOperator(
        task_id="check_changelog_configs",
        application_id="{{ params.application_id }}",
        topology="{{ params.topology }}",
        streams_config="{{ params.streams_config }}",
        repair="{{ params.repair }}",
    )
    retention >> compaction >> changelog_configs
