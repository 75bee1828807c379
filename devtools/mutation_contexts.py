"""A pytest plugin for `devtools.mutation`'s coverage run: which test ran each line.

coverage.py's own `dynamic_context = test_function` loses the test as soon as an async test
awaits (work done in other tasks is attributed to no test), so the context is switched here
around each test's whole protocol (setup, call, teardown) instead. Also notes each test's
duration, to set the mutants' time limits. Load with `-p devtools.mutation_contexts`; the
durations go to the JSON file named by MUTATION_DURATIONS.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import coverage
import pytest

_durations: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    current = coverage.Coverage.current()
    if current is not None:
        current.switch_context(item.nodeid)
    started = time.monotonic()
    try:
        yield
    finally:
        _durations[item.nodeid] = time.monotonic() - started
        if current is not None:
            current.switch_context("")


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("MUTATION_DURATIONS")
    if target:
        Path(target).write_text(json.dumps(_durations), encoding="utf-8")
