"""Benchmarks: each script prints its figures (the last line is JSON); none is a test.

Run one from the repository root as a module, ``python -m bench.<name>``, or by path,
``python bench/<name>.py``: a script run by path runs itself again as a module, so that it
imports ``bench`` and ``tools`` from the repository the way the tests do (docs/benchmarks.md).
"""
