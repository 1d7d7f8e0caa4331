"""The Python examples in docs/testing-topologies.md and docs/dsl.md run as written."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs"


def _blocks(name: str) -> list[str]:
    text = (DOCS / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("name", ["testing-topologies.md", "dsl.md"])
def test_python_blocks_run(name):
    blocks = _blocks(name)
    assert blocks, f"no python example in {name}"
    for block in blocks:
        exec(compile(block, f"{name}", "exec"), {"__name__": "docs_example"})
