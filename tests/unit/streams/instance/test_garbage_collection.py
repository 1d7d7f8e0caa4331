"""raise_gc_thresholds: raises the collector's thresholds, never lowers or re-enables them."""

import gc

import pytest

from airflow_stateful_provider.streams.instance.garbage_collection import STREAMS_GC_THRESHOLDS, raise_gc_thresholds


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_defaults_are_raised_once(thresholds):
    gc.set_threshold(700, 10, 10)
    assert raise_gc_thresholds() is True
    assert gc.get_threshold() == STREAMS_GC_THRESHOLDS
    assert raise_gc_thresholds() is False


def test_higher_thresholds_of_the_application_stay(thresholds):
    gc.set_threshold(50_000, 20, 1_000)
    assert raise_gc_thresholds() is True
    assert gc.get_threshold() == (50_000, 50, 1_000)


def test_a_disabled_collector_stays_disabled(thresholds):
    gc.set_threshold(0, 10, 10)
    assert raise_gc_thresholds() is False
    assert gc.get_threshold() == (0, 10, 10)
