"""The one public import path: ``airflow_stateful_provider.streams`` exports (``__all__``)
everything a topology is written, run, tested and watched with, and importing it loads
neither Airflow nor Spark. The documentation's use of it: tests/unit/test_docs.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import airflow_stateful_provider.streams as streams

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_names_a_user_writes_a_topology_with_are_exported():
    wanted = {"StreamsBuilder", "Topology", "KafkaStreams", "KafkaStreamsState", "StreamsConfig", "Stores",
              "Materialized", "Consumed", "Produced", "Grouped", "Joined", "SessionWindows", "EmitStrategy",
              "Processor", "ProcessorContext", "Record", "PunctuationType", "TopologyTestDriver",
              "StateRestoreListener", "StandbyUpdateListener", "Serdes", "Serde", "fetch_application_status",
              "read_status_documents", "ApplicationStatus", "RestorationProgress", "render_status_table"}
    assert wanted <= set(streams.__all__)
    assert len(streams.__all__) == len(set(streams.__all__))
    for name in streams.__all__:
        assert getattr(streams, name) is not None, name
    assert streams.KafkaStreams.State is streams.KafkaStreamsState


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from airflow_stateful_provider.streams import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(streams.__all__)


def test_the_engine_package_loads_neither_airflow_nor_spark():
    probe = ("import sys, airflow_stateful_provider.streams; "
             "print(sorted(m for m in ('airflow', 'pyspark') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in streams/__init__.py."""
    tree = ast.parse(Path(streams.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{ast.unparse(node)}: a re-export is written `X as X`"
            assert alias.name not in imported, f"{alias.name} imported twice"
            imported[alias.name] = "." + node.module
    return imported


def test_the_type_checking_imports_and_the_lazy_exports_agree():
    exported = {name: module for module, names in streams._EXPORTS.items() for name in names}
    imported = _type_checking_imports()
    assert sorted(set(exported) - set(imported)) == [], "exported but not imported under TYPE_CHECKING"
    assert sorted(set(imported) - set(exported)) == [], "imported under TYPE_CHECKING but not in _EXPORTS"
    assert {n: m for n, m in imported.items() if exported[n] != m} == {}, "imported from another module"


def test_a_type_checker_resolves_a_public_name_to_the_real_class(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from airflow_stateful_provider.streams import KafkaStreams, StreamsConfig\n"
                     "reveal_type(KafkaStreams)\nreveal_type(StreamsConfig.from_mapping)\n")
    result = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary",
                             "--cache-dir", str(REPO_ROOT / ".mypy_cache"), str(probe)],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    revealed = [line for line in result.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 2, result.stdout + result.stderr
    assert "airflow_stateful_provider.streams.instance.kafka_streams.KafkaStreams" in revealed[0], revealed[0]
    assert "airflow_stateful_provider.streams.config.StreamsConfig" in revealed[1], revealed[1]
