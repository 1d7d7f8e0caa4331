"""The retention tests' instances: each test module wraps a TopologyTestDriver in its own
``Instance(store_type, changelogs)``; ``instances()`` makes one on each store type and closes
them after the test."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["in_memory", "rocksdb"])
def store_type(request):
    return request.param


@pytest.fixture
def instances(request, store_type):
    made = []

    def make(changelogs=None):
        made.append(request.module.Instance(store_type, changelogs))
        return made[-1]

    yield make
    for instance in made:
        instance.driver.close()
