"""Provider metadata: every listed module imports, every hook/sensor/trigger/operator module
is listed, the connection type and its form are what Airflow 3.3 reads, and the
minimum-Airflow guard."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil

import pytest
from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator, Connection
from airflow.triggers.base import BaseTrigger

import airflow_stateful_provider
from airflow_stateful_provider.get_provider_info import get_provider_info
from airflow_stateful_provider.hooks.kafka_connection import (
    EXTRA_KEYS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    client_configs_from_connection,
)
from airflow_stateful_provider.hooks.stateful_streams import StatefulStreamsHook
from airflow_stateful_provider.version_compat import MIN_AIRFLOW_VERSION, require_airflow

SECTIONS = {"hooks": BaseHook, "sensors": BaseSensorOperator, "triggers": BaseTrigger, "operators": BaseOperator}


def listed(section: str) -> list[str]:
    return [m for entry in get_provider_info().get(section, []) for m in entry["python-modules"]]


@pytest.mark.parametrize("section", SECTIONS)
def test_every_listed_module_imports(section):
    for name in listed(section):
        importlib.import_module(name)


@pytest.mark.parametrize("section", SECTIONS)
def test_every_module_defining_a_concrete_class_of_the_section_is_listed(section):
    base = SECTIONS[section]
    try:
        package = importlib.import_module(f"airflow_stateful_provider.{section}")
    except ModuleNotFoundError:
        assert not listed(section), f"{section} listed but the package does not exist"
        return
    defining = set()
    for info in pkgutil.iter_modules(package.__path__, prefix=f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            concrete = cls.__module__ == module.__name__ and not cls.__name__.startswith("_")
            sensor_among_operators = section == "operators" and issubclass(cls, BaseSensorOperator)
            if concrete and issubclass(cls, base) and not sensor_among_operators:
                defining.add(module.__name__)
    defining.discard("airflow_stateful_provider.sensors.base")  # the shared base, not a sensor of its own
    assert defining <= set(listed(section)), f"unlisted {section} modules: {sorted(defining - set(listed(section)))}"


def test_connection_type_names_the_hook():
    (conn_type,) = get_provider_info()["connection-types"]
    module, _, cls = conn_type["hook-class-name"].rpartition(".")
    hook_class = getattr(importlib.import_module(module), cls)
    assert hook_class is StatefulStreamsHook
    assert conn_type["connection-type"] == hook_class.conn_type == "stateful_streams"
    assert conn_type["hook-name"] == hook_class.hook_name
    assert hook_class.default_conn_name == "stateful_streams_default"
    assert hook_class.conn_name_attr == "stateful_streams_conn_id"


def test_form_fields_are_exactly_what_the_hook_reads():
    (conn_type,) = get_provider_info()["connection-types"]
    fields = conn_type["conn-fields"]
    assert set(fields) == set(EXTRA_KEYS) - {"bootstrap_servers"}  # the host field holds the servers
    assert fields["security_protocol"]["schema"]["enum"] == list(SECURITY_PROTOCOLS)
    assert [m for m in fields["sasl_mechanism"]["schema"]["enum"] if m] == list(SASL_MECHANISMS)
    behaviour = conn_type["ui-field-behaviour"]
    assert behaviour["relabeling"] == {"host": "Bootstrap servers", "login": "SASL username",
                                       "password": "SASL password or OAuth token"}
    assert fields["ssl_password"]["schema"]["format"] == "password"  # masked in the form
    assert "password" not in behaviour["hidden-fields"] and "host" not in behaviour["hidden-fields"]
    # What the form saves (UI-prefixed extras, host, login, password) is a valid connection.
    form = Connection(conn_id="ui", conn_type="stateful_streams", host="b1:9093,b2:9093", login="u", password="p",
                      extra=json.dumps({f"extra__stateful_streams__{k}": v for k, v in
                                        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
                                         "ssl_cafile": "/ca.pem"}.items()}))
    assert client_configs_from_connection(form)["security_protocol"] == "SASL_SSL"


def test_providers_manager_reads_the_declarative_form_and_the_password_is_a_masked_field():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    widgets = {k: v for k, v in manager.connection_form_widgets.items() if k.startswith("extra__stateful_streams__")}
    assert {w.field_name for w in widgets.values()} == set(EXTRA_KEYS) - {"bootstrap_servers"}
    assert {w.field_name for w in widgets.values() if w.is_sensitive} == {"ssl_password"}
    behaviour = manager.field_behaviours["stateful_streams"]
    assert behaviour["relabeling"]["password"] == "SASL password or OAuth token"
    assert "password" not in behaviour["hidden_fields"]  # Airflow's own password field: always masked


def test_provider_info_versions_match_the_package():
    assert get_provider_info()["versions"] == [airflow_stateful_provider.__version__]


@pytest.mark.parametrize("version", ["3.3.0", "3.3.0rc1", "3.3.2", "4.0.0.dev0"])
def test_supported_airflow_versions_pass(version):
    require_airflow(version)


@pytest.mark.parametrize("version", ["3.2.9", "3.0.0", "2.11.0", "2.99.0rc1"])
def test_older_airflow_is_refused_naming_both_versions(version):
    with pytest.raises(RuntimeError) as info:
        require_airflow(version)
    assert f"Apache Airflow {MIN_AIRFLOW_VERSION}+" in str(info.value)
    assert f"Apache Airflow {version} is installed" in str(info.value)


def test_unreadable_airflow_version_is_refused():
    with pytest.raises(RuntimeError, match="cannot read the installed Airflow version 'banana'"):
        require_airflow("banana")


def test_the_installed_airflow_passes_the_guard():
    require_airflow()


def test_every_extra_link_is_listed_and_imports():
    from airflow.sdk import BaseOperatorLink

    from airflow_stateful_provider.links import stateful_streams

    listed_links = get_provider_info()["extra-links"]
    defined = {f"{stateful_streams.__name__}.{name}"
               for name, cls in inspect.getmembers(stateful_streams, inspect.isclass)
               if issubclass(cls, BaseOperatorLink) and cls.__module__ == stateful_streams.__name__}
    assert set(listed_links) == defined and len(defined) == 2
