"""Store maintenance from Airflow: retention and compaction of session and versioned stores,
and the changelog topic config check (docs/semantics.md §7) with optional repair.

Retention and compaction run either

- **online**: the command goes through ``<application_id>-control`` to every live instance,
  which applies it at a safe point of its loop to every store it holds (active, standby,
  warmup) and answers in its status document (docs/control-topic.md); or
- **offline**: on the state directory of a *stopped* instance, opening each store directly.
  A store still open by a running instance is refused (its RocksDB lock is held).

Both log a per-store table and return the per-store results (XCom, JSON-ready); a failed or
silent instance (or store) fails the task, naming it and listing what did succeed.
See docs/maintenance.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.operators.maintenance_arguments import (
    check_mode,
    is_template,
    parse_now_ms,
    parse_store_names,
)
from airflow_stateful_provider.operators.maintenance_report import json_ready, result_table, utc_text
from airflow_stateful_provider.streams.durations import seconds_arg_ms

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_stateful_provider.streams.control.commands import CommandOutcome
    from airflow_stateful_provider.streams.topics.config_drift import Drift
    from airflow_stateful_provider.streams.topics.internal_topics import InternalTopic

__all__ = ["ChangelogConfigOperator", "StoreCompactionOperator", "StoreRetentionOperator"]

#: A ``now`` further ahead of the wall clock than this is logged as a warning: it drops data
#: that is still live by the instances' clocks.
_FUTURE_WARNING_MS = 60_000


# ---------------------------------------------------------------------------- retention and compaction


class _StoreMaintenanceOperator(BaseOperator):
    """Shared by retention and compaction (see the module docstring); subclasses set
    ``command_type`` and how one offline store is maintained."""

    command_type: str = ""
    template_fields: Sequence[str] = ("application_id", "stores", "mode", "state_dir", "stateful_streams_conn_id")
    ui_color = "#e8e0f4"

    def __init__(
        self,
        *,
        application_id: str | None = None,
        stores: str | Iterable[str] | None = None,
        mode: str = "online",
        state_dir: str | os.PathLike[str] | None = None,
        stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
        timeout: float | timedelta = timedelta(minutes=10),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application_id = application_id
        self.stores = stores if stores is None or isinstance(stores, str) else list(stores)
        self.mode = mode
        self.state_dir = None if state_dir is None else os.fspath(state_dir)
        self.stateful_streams_conn_id = stateful_streams_conn_id
        self.timeout_ms = seconds_arg_ms(timeout, "timeout", minimum_ms=1)
        self._rows: list[dict[str, Any]] = []  # what execute returned: the lineage's outputs
        # Check what is already known; templated values are checked again once rendered.
        if not is_template(mode):
            self._check_arguments()

    @cached_property
    def hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    def _check_arguments(self) -> tuple[str, tuple[str, ...] | None]:
        mode = check_mode(self.mode)
        stores = None if is_template(self.stores) else parse_store_names(self.stores)
        if mode == "online":
            if not self.application_id:
                raise ValueError(f"{self.task_id}: online mode needs application_id")
            if self.state_dir:
                raise ValueError(f"{self.task_id}: state_dir {self.state_dir!r} is only for mode='offline'; "
                                 f"online, the instances maintain their own state directories")
        elif not self.state_dir:
            raise ValueError(f"{self.task_id}: offline mode needs state_dir (the state directory of a stopped "
                             f"instance, holding <application_id>/<task>/<store>/)")
        return mode, stores

    def _command_kwargs(self) -> dict[str, Any]:
        return {}

    def _describe(self) -> str:
        return self.command_type

    def execute(self, context: Context) -> list[dict[str, Any]]:
        mode, stores = self._check_arguments()
        self._rows = self._execute_online(stores) if mode == "online" else self._execute_offline(stores)
        return self._rows

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Outputs: the stores maintained (skipped and failed ones left out): online each
        store's changelog topic, offline each store's directory."""
        from airflow_stateful_provider.operators.lineage import file_dataset, operator_lineage, topic_datasets

        done = [row for row in self._rows
                if isinstance(row.get("result"), Mapping) and not {"skipped", "error"} & set(row["result"])]
        if self.mode == "offline":
            return operator_lineage(outputs=[file_dataset(path) for path in sorted({row["path"] for row in done})])
        changelogs = {f"{self.application_id}-{row['store']}-changelog" for row in done}
        return operator_lineage(outputs=topic_datasets(self.hook.bootstrap_servers, changelogs))

    # ------------------------------------------------------------------ online

    def _execute_online(self, stores: tuple[str, ...] | None) -> list[dict[str, Any]]:
        from airflow_stateful_provider.streams.control.channel import live_instances
        from airflow_stateful_provider.streams.control.commands import new_command

        app = self.application_id
        if not app:  # __init__ checked it; a template may still render it empty
            raise ValueError(f"{self.task_id}: online mode needs application_id")
        status = self.hook.get_status(app)
        command_kwargs = self._command_kwargs()
        probe = new_command(app, self.command_type, stores=stores, **command_kwargs)
        expected = live_instances(status, probe)
        stale = [i.instance_id for i in status.stale_instances]
        if stale:
            self.log.warning("stale instance(s) %s publish no status: they will not be asked or waited for", stale)
        if not expected:
            seen = [f"{i.instance_id} ({i.state}{' stale' if i.stale else ''})" for i in status.instances]
            raise AirflowException(
                f"{self._describe()} on application {app!r}: no live instance to apply it (instances: {seen}); "
                f"for a stopped application use mode='offline' on each instance's state_dir")
        command = self.hook.send_command(app, self.command_type, stores=stores, **command_kwargs)
        self.log.info("sent %s (%s) to %s; waiting up to %g s for %s", self._describe(), command.command_id,
                      f"{app}-control", self.timeout_ms / 1000, list(expected))
        outcome = self.hook.wait_for_command(command, instances=expected,
                                             timeout=timedelta(milliseconds=self.timeout_ms))
        return self._online_result(outcome, expected)

    def _online_result(self, outcome: CommandOutcome, expected: Sequence[str]) -> list[dict[str, Any]]:
        app = self.application_id
        rows: list[dict[str, Any]] = []
        succeeded: list[str] = []
        for instance_id in expected:
            ack = outcome.acknowledgements.get(instance_id)
            if ack is None or ack.status != "done":
                continue
            result = ack.result if isinstance(ack.result, Mapping) else {}
            mine = [{"instance": instance_id, **row} for row in result.get("stores") or []]
            rows.extend(mine)
            succeeded.append(f"{instance_id} ({len(mine)} store(s))")
        rows = json_ready(rows)
        table = result_table(rows)
        if outcome.succeeded:
            self.log.info("%s on application %s done by %d instance(s):\n%s", self._describe(), app, len(expected),
                          table)
            return rows
        problems = []
        for instance_id in outcome.failed:
            error = outcome.acknowledgements[instance_id].result
            error = error.get("error") if isinstance(error, Mapping) else error
            problems.append(f"{instance_id} failed: {error}")
        if outcome.missing:
            problems.append(f"no answer within {self.timeout_ms / 1000:g}s from {list(outcome.missing)} "
                            f"(an instance that stops or restarts meanwhile never applies it; re-run)")
        raise AirflowException(
            f"{self._describe()} ({outcome.command.command_id}) on application {app!r} did not succeed everywhere: "
            f"{'; '.join(problems)}. Succeeded: {', '.join(succeeded) or 'none'}\n{table}")

    # ------------------------------------------------------------------ offline

    def _apply_offline(self, store: Any) -> Any:
        raise NotImplementedError

    def _after_offline(self, rows: list[dict[str, Any]]) -> None:
        """Hook: once every selected store was maintained offline."""

    def _execute_offline(self, stores: tuple[str, ...] | None) -> list[dict[str, Any]]:
        from airflow_stateful_provider.streams.errors import InvalidStoreError
        from airflow_stateful_provider.streams.state.common.kind import maintainable_store_types
        from airflow_stateful_provider.streams.state.common.metadata import read_metadata
        from airflow_stateful_provider.streams.state.store_dir import find_stores, open_store

        if not self.state_dir:  # __init__ checked it; a template may still render it empty
            raise ValueError(f"{self.task_id}: offline mode needs state_dir")
        state_dir = os.path.abspath(self.state_dir)
        if not os.path.isdir(state_dir):
            raise ValueError(f"{self.task_id}: state_dir {state_dir} is not a directory")
        root = os.path.join(state_dir, self.application_id) if self.application_id else state_dir
        if not os.path.isdir(root):
            present = sorted(d for d in os.listdir(state_dir) if os.path.isdir(os.path.join(state_dir, d)))
            raise ValueError(f"{self.task_id}: no directory of application {self.application_id!r} in {state_dir} "
                             f"(applications there: {present})")
        found: list[dict[str, Any]] = []
        for path in find_stores(root):
            metadata = read_metadata(path)
            parts = os.path.relpath(path, state_dir).split(os.sep)
            found.append({"application_id": parts[-3] if len(parts) >= 3 else self.application_id,
                          "task_id": parts[-2] if len(parts) >= 2 else "-", "store": metadata.name,
                          "store_type": metadata.store_type, "path": path})
        if not found:
            raise ValueError(f"{self.task_id}: no store under {root}")
        maintained_types = maintainable_store_types()  # session and versioned
        maintained = sorted({f["store"] for f in found if f["store_type"] in maintained_types})
        if stores is not None:
            others = {f["store"]: f["store_type"] for f in found if f["store_type"] not in maintained_types}
            unknown = [s for s in stores if s not in maintained]
            if unknown:
                kinds = [f"{s!r} is a {others[s]} store" for s in unknown if s in others]
                raise ValueError(f"{self.task_id}: stores {unknown} are not {' or '.join(maintained_types)} stores "
                                 f"under {root}{' (' + '; '.join(kinds) + ')' if kinds else ''}; "
                                 f"available: {maintained}")
        selected = [f for f in found if stores is None or f["store"] in stores]
        rows: list[dict[str, Any]] = []
        todo = []
        for entry in selected:
            row: dict[str, Any] = {"instance": None, "application_id": entry["application_id"],
                                   "task_id": entry["task_id"],
                   "store": entry["store"], "role": None, "store_type": entry["store_type"], "path": entry["path"]}
            if entry["store_type"] not in maintained_types:
                row["result"] = {"skipped": f"{entry['store_type']} store: retention and compaction apply to "
                                            f"{' and '.join(maintained_types)} stores"}
            else:
                todo.append(row)
            rows.append(row)
        # Open every store before touching any: a running instance must not see half of them maintained.
        opened: list[tuple[dict[str, Any], Any]] = []
        try:
            for row in todo:
                try:
                    opened.append((row, open_store(row["path"], read_only=False)))
                except InvalidStoreError as exc:
                    if "already open for writing" in str(exc):
                        raise AirflowException(
                            f"{self.task_id}: store {row['store']!r} of task {row['task_id']} at {row['path']} is "
                            f"locked by a running instance; stop that instance before offline maintenance, or use "
                            f"mode='online'. Nothing was changed.") from exc
                    raise
            failures = []
            for row, store in opened:
                try:
                    row["result"] = self._apply_offline(store).as_dict()
                except Exception as exc:  # noqa: BLE001 - reported with what succeeded
                    row["result"] = {"error": f"{type(exc).__name__}: {exc}"}
                    failures.append(f"{row['task_id']}/{row['store']}: {type(exc).__name__}: {exc}")
        finally:
            for _, store in opened:
                store.close()
        if not failures:
            self._after_offline(todo)
        rows = json_ready(rows)
        table = result_table(rows)
        if failures:
            raise AirflowException(f"{self._describe()} offline under {root} failed for {failures}; the other stores "
                                   f"are done\n{table}")
        self.log.info("%s offline under %s:\n%s", self._describe(), root, table)
        return rows


class StoreRetentionOperator(_StoreMaintenanceOperator):
    """Drop the expired segments of session and versioned stores as of ``now``, even when a
    store's own stream time has stalled (no input): what keeps disks bounded for keys and
    partitions that went quiet.

    :param application_id: the application (templated); required online; offline it selects
        ``<state_dir>/<application_id>/`` (None: every application under ``state_dir``).
    :param stores: store names (list or ``"a,b"``; templated); None: every session and
        versioned store.
    :param now: the time retention is measured against (templated): aware datetime, epoch ms
        or ISO-8601 string (``"{{ data_interval_end }}"``). Default None: the wall clock when
        the task executes, the same for every instance. A time ahead of the data moves the
        stores' stream time there (later, older writes are dropped as expired).
    :param mode: ``"online"`` (control topic) or ``"offline"`` (``state_dir`` of a stopped
        instance); templated.
    :param state_dir: offline only: the stopped instance's ``state_dir`` (templated).
    :param write_cutoff: offline only: also write each maintained store's cut-off marker into
        its changelog partition (through the connection), so that restores of those stores
        reach the same cut-off (online, the instances write it themselves). Default False:
        offline mode then needs no Kafka connection, and restored copies do not see the run.
    :param stateful_streams_conn_id: connection of type ``stateful_streams`` (online).
    :param timeout: online: how long to wait for every live instance's answer (seconds or a
        timedelta; default 10 minutes).
    """

    command_type = "enforce_retention"
    template_fields: Sequence[str] = ("application_id", "stores", "mode", "state_dir", "now", "write_cutoff",
                                      "stateful_streams_conn_id")

    def __init__(self, *, now: datetime | int | str | None = None, write_cutoff: bool | str = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.now = now
        self.write_cutoff = write_cutoff
        if not is_template(now):
            parse_now_ms(now)
        self._now_ms: int | None = None

    def execute(self, context: Context) -> list[dict[str, Any]]:
        wall = time.time_ns() // 1_000_000
        self._now_ms = parse_now_ms(self.now, wall_clock_ms=wall)
        if self._now_ms > wall + _FUTURE_WARNING_MS:
            self.log.warning("now %s is %.0f s ahead of the wall clock: data younger than the retention by the "
                             "instances' clocks will be dropped, and the stores' stream time moves there",
                             utc_text(self._now_ms), (self._now_ms - wall) / 1000)
        return super().execute(context)

    def _command_kwargs(self) -> dict[str, Any]:
        return {"now_ms": self._now_ms}

    def _describe(self) -> str:
        return f"enforce_retention as of {utc_text(self._now_ms)} UTC ({self._now_ms})"

    def _apply_offline(self, store: Any) -> Any:
        return store.enforce_retention(self._now_ms)

    def _after_offline(self, rows: list[dict[str, Any]]) -> None:
        if self.write_cutoff is True or str(self.write_cutoff).lower() == "true":  # a rendered template
            from airflow_stateful_provider.operators.maintenance_changelog import write_offline_cutoffs

            write_offline_cutoffs(self.hook, rows)


class StoreCompactionOperator(_StoreMaintenanceOperator):
    """Full RocksDB compaction of session and versioned stores: returns the space of
    deleted and overwritten rows (after retention or heavy updates) to the disk.

    Parameters as :class:`StoreRetentionOperator` without ``now``.
    """

    command_type = "compact"

    def _apply_offline(self, store: Any) -> Any:
        return store.compact()


# ---------------------------------------------------------------------------- changelog configs


class ChangelogConfigOperator(BaseOperator):
    """Check the configs of the application's internal topics (changelogs, repartition
    topics) against docs/semantics.md §7, and optionally repair them.

    Kafka Streams sets these configs only when it creates a topic; a later hand edit (a
    shortened ``retention.ms``, a changelog switched to ``delete``) loses state at the next
    restore without any error. Logs a drift table and returns (XCom)
    ``{"application_id", "checked_topics", "drift", "repaired", "remaining", "unchecked"}``
    (drift rows: ``topic, key, expected, actual, repairable, reason``).

    :param application_id: the application (templated).
    :param topology: ``"package.module:function"`` building the application's topology
        (as the runner takes it; templated): exact expected configs and partition counts.
        None: inferred from topic names and current configs, and what cannot be checked is
        listed under ``unchecked``.
    :param streams_config: further StreamsConfig values the topology function reads (e.g.
        ``{"app_configs": {...}}``); application_id and bootstrap servers come from this
        operator and its connection (templated).
    :param repair: False (default): dry run, nothing changes. True: alter the drifting
        configs (incremental alter: other keys keep their values) and re-read to confirm.
    :param fail_on_drift: fail the task when repairable drift remains (a dry run that alerts).
    :param stateful_streams_conn_id: connection of type ``stateful_streams``.

    Partition-count mismatches, missing topics and findings without an exact expected value
    always fail the task: they need a person (docs/maintenance.md).
    """

    template_fields: Sequence[str] = ("application_id", "topology", "streams_config", "repair",
                                      "stateful_streams_conn_id")
    ui_color = "#e8e0f4"

    def __init__(
        self,
        *,
        application_id: str,
        topology: str | None = None,
        streams_config: Mapping[str, Any] | None = None,
        repair: bool = False,
        fail_on_drift: bool = False,
        stateful_streams_conn_id: str = StatefulStreamsHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application_id = application_id
        self.topology = topology
        self.streams_config = None if streams_config is None else streams_config
        self.repair = repair
        self.fail_on_drift = fail_on_drift
        self._lineage_topics: tuple[list[str], list[str]] = ([], [])  # (checked, repaired) by execute
        self.stateful_streams_conn_id = stateful_streams_conn_id
        if not application_id:
            raise ValueError(f"{self.task_id}: application_id is required")
        self._check_arguments(rendered=False)

    @cached_property
    def hook(self) -> StatefulStreamsHook:
        return StatefulStreamsHook(stateful_streams_conn_id=self.stateful_streams_conn_id)

    def _check_arguments(self, *, rendered: bool) -> None:
        if (rendered or not is_template(self.topology)) and self.topology not in (None, ""):
            module, sep, attribute = str(self.topology).partition(":")
            if not sep or not module or not attribute:
                raise ValueError(f"{self.task_id}: topology must be 'package.module:function', got {self.topology!r}")
        if (rendered or not is_template(self.streams_config)) and self.streams_config not in (None, "") \
                and not isinstance(self.streams_config, Mapping):
            raise ValueError(f"{self.task_id}: streams_config must be a mapping of StreamsConfig values, got "
                             f"{type(self.streams_config).__name__} {self.streams_config!r} (with a template, set "
                             f"render_template_as_native_obj=True on the DAG)")
        if (rendered or not is_template(self.repair)) and not isinstance(self.repair, bool):
            raise ValueError(f"{self.task_id}: repair must be True or False, got {self.repair!r}")
        if not isinstance(self.fail_on_drift, bool):
            raise ValueError(f"{self.task_id}: fail_on_drift must be True or False, got {self.fail_on_drift!r}")

    # ------------------------------------------------------------------ broker reads

    @staticmethod
    def _describe_configs(admin: Any, topics: Iterable[str]) -> dict[str, dict[str, str | None]]:
        from kafka.admin import ConfigResource, ConfigResourceType

        topics = sorted(set(topics))
        if not topics:
            return {}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics],
                                           config_filter="all")
        return {name: {key: entry.get("value") for key, entry in configs.items()}
                for name, configs in described.get("topic", {}).items() if name in topics}

    def _expected_from_topology(self, admin: Any) -> tuple[list[InternalTopic], list[str]]:
        from airflow_stateful_provider.streams.config import StreamsConfig
        from airflow_stateful_provider.streams.runner import load_topology
        from airflow_stateful_provider.streams.topics.internal_topics import internal_topics
        from airflow_stateful_provider.streams.topics.topic_manager import fetch_partition_counts

        given = dict(self.streams_config or {})
        if given.get("application_id", self.application_id) != self.application_id:
            raise ValueError(f"{self.task_id}: streams_config application_id {given['application_id']!r} differs from "
                             f"application_id {self.application_id!r}")
        config = StreamsConfig.from_mapping({**given, "application_id": self.application_id,
                                             "bootstrap_servers": self.hook.bootstrap_servers})
        topology = load_topology(str(self.topology), config)
        external = [topology.decorate_topic(t, self.application_id)
                    for t in topology.source_topics() if not topology.is_internal_topic(t)]
        counts = fetch_partition_counts(admin, external)
        missing = sorted(set(external) - set(counts))
        notes = []
        if missing:
            notes.append(f"source topics {missing} do not exist: partition counts of the internal topics not checked")
            return internal_topics(topology, self.application_id, None), notes
        return internal_topics(topology, self.application_id, counts), notes

    def _read(self, admin: Any, names: set[str]) -> tuple[list[InternalTopic], list[Drift], list[str],
                                                            dict[str, dict[str, str | None]], dict[str, int]]:
        from airflow_stateful_provider.streams.topics.config_drift import (
            application_internal_topic_names,
            infer_internal_topics,
        )
        from airflow_stateful_provider.streams.topics.topic_manager import fetch_partition_counts

        if self.topology:
            expected, notes = self._expected_from_topology(admin)
            findings: list[Drift] = []
            candidates = [t.name for t in expected]
        else:
            candidates = application_internal_topic_names(self.application_id, names)
            expected, findings, notes = [], [], []
        present = [t for t in candidates if t in names]
        configs = self._describe_configs(admin, present)
        partitions = fetch_partition_counts(admin, present)
        if not self.topology:
            inferred = infer_internal_topics(self.application_id, configs, partitions)
            expected, findings, notes = list(inferred.topics), list(inferred.findings), list(inferred.unchecked)
        return expected, findings, notes, configs, partitions

    # ------------------------------------------------------------------ execute

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_stateful_provider.streams.topics.config_drift import (
            config_drift,
            drift_table,
            repair_plan,
        )

        self._check_arguments(rendered=True)
        app = self.application_id
        admin = self.hook.get_admin_client(client_id=f"{app}-changelog-config")
        try:
            names = set(admin.list_topics())
            expected, findings, notes, configs, partitions = self._read(admin, names)
            if not expected and not findings and f"{app}-status" not in names:
                raise AirflowException(f"unknown application {app!r}: neither internal topics nor {app}-status on "
                                       f"{','.join(self.hook.bootstrap_servers)}")
            drift = [*config_drift(expected, configs, partitions), *findings]
            self.log.info("internal topics of %s: %d checked (%s)\n%s", app, len(expected),
                          "exact, from the topology" if self.topology else "inferred without the topology",
                          drift_table(drift))
            for note in notes:
                self.log.info("not checked: %s", note)
            repaired: list[Drift] = []
            remaining = drift
            plan = repair_plan(drift)
            if plan and self.repair:
                self._alter(admin, plan)
                repaired = [d for d in drift if d.repairable]
                expected, findings, notes, configs, partitions = self._read(admin, set(admin.list_topics()))
                remaining = [*config_drift(expected, configs, partitions), *findings]
                self.log.info("after repair:\n%s", drift_table(remaining))
            elif plan:
                self.log.warning("dry run: %d config value(s) drift on %s; repair=True would set them",
                                 sum(len(v) for v in plan.values()), sorted(plan))
        finally:
            admin.close()
        self._lineage_topics = (sorted(t.name for t in expected), sorted({d.topic for d in repaired}))
        result = json_ready({"application_id": app, "checked_topics": sorted(t.name for t in expected),
                              "drift": [d.as_dict() for d in drift], "repaired": [d.as_dict() for d in repaired],
                              "remaining": [d.as_dict() for d in remaining], "unchecked": list(notes)})
        manual = [d for d in remaining if not d.repairable]
        left = [d for d in remaining if d.repairable]
        if self.repair and left:
            raise AirflowException(f"repair of {app}'s internal topic configs did not take:\n{drift_table(left)}")
        if manual:
            raise AirflowException(f"internal topics of {app!r} need manual action:\n{drift_table(manual)}")
        if left and self.fail_on_drift:
            raise AirflowException(f"internal topic configs of {app!r} drift (dry run; repair=True fixes them):\n"
                                   f"{drift_table(left)}")
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs: the internal topics whose configs were read; outputs: those repaired."""
        from airflow_stateful_provider.operators.lineage import operator_lineage, topic_datasets

        checked, repaired = self._lineage_topics
        servers = self.hook.bootstrap_servers
        return operator_lineage(inputs=topic_datasets(servers, checked), outputs=topic_datasets(servers, repaired))

    def _alter(self, admin: Any, plan: Mapping[str, Mapping[str, str]]) -> None:
        """Set the planned values. kafka-python 3 uses IncrementalAlterConfigs on brokers that
        have it (2.3+): only these keys change. On older brokers it falls back to AlterConfigs
        and re-sends the topic's other modified keys, since that request resets omitted ones."""
        from kafka.admin import ConfigResource, ConfigResourceType

        resources = [ConfigResource(ConfigResourceType.TOPIC, topic, dict(values)) for topic, values in plan.items()]
        answer = admin.alter_configs(resources)
        errors = {topic: outcome for topic, outcome in answer.get("topic", {}).items() if outcome != "OK"}
        if errors:
            raise AirflowException(f"altering configs of {self.application_id}'s internal topics failed: {errors} "
                                   f"(planned: {dict(plan)})")
        for topic, values in plan.items():
            self.log.info("set on %s: %s", topic, dict(values))
