"""Opt-in pytest plugin: wall time against CPU time per test, to find the tests that mostly wait.

``pytest -p support.timing_plugin`` writes one JSON line per test (setup, call and teardown together) to
``$MICROCOMPACT_TIMING_OUT`` (default ``test-timing.jsonl``), appended by every xdist worker. CPU is this
process's plus its finished children's (``RUSAGE_CHILDREN``), so a test that starts ``microcompact serve``
counts the server's CPU once the server exits. ``spawns`` counts the programs the test started through
``subprocess`` and ``pythons`` those that were Python, each paying an interpreter start and its imports.
A test whose wall time is much larger than its CPU time sleeps, polls or waits on a timeout: on an idle
machine, that is where the suite's wall time goes.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

OUT_ENV = "MICROCOMPACT_TIMING_OUT"
_SPAWNS: list[str] = []  # the programs this process started, through subprocess, since the test began


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "subprocess.Popen":
        _SPAWNS.append(os.path.basename(str(args[0])))


sys.addaudithook(_audit)


def _cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _SPAWNS.clear()
    wall, cpu = time.perf_counter(), _cpu()
    yield
    row = {
        "test": item.nodeid,
        "wall": round(time.perf_counter() - wall, 4),
        "cpu": round(_cpu() - cpu, 4),
        "spawns": len(_SPAWNS),
        "pythons": sum(name.startswith("python") for name in _SPAWNS),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(os.environ.get(OUT_ENV, "test-timing.jsonl"), "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")
