"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Every Kubernetes API emulator the tests start (in this process or a subprocess) checks each
# request and answer against the pinned Kubernetes API schema (backends/kubernetes/schema.py):
# a field the real API server would reject fails the test that sent it.
os.environ.setdefault("MERKAT_KUBE_SCHEMA", "1")

# pytest-xdist's workers run with COLUMNS=80 (the controller's terminal), which would make the
# CLI's tables think they print to an 80-column terminal and cut cells; the CLI under test
# (in process or as a subprocess) prints as it does into a pipe, whatever runs the tests.
os.environ.pop("COLUMNS", None)


CPU_HEAVY_GROUP = "cpu_heavy"
LOCKING_FIXTURES = ("cpu_heavy", "quiet_machine")  # quiet_machine: test_hostile_http's, per module


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
        config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Every test that takes the ``cpu_heavy`` lock (``LOCKING_FIXTURES``) joins one xdist
    group: under ``make test`` (``-n 2 --dist loadgroup``) they run one after another on one
    worker, started first (xdist hands out its largest group first), while the other worker
    runs everything else. Without the group both workers would pick such tests and one would
    wait for the lock, idle (docs/testing.md). The mark goes on before xdist's own hook reads
    it (a wrapper's first half runs before every hook). Under xdist, the tests marked ``slow``
    come first in the order the workers report (so xdist hands them out first: no long test
    left for the end while the other worker has finished); a run in one process keeps the
    files' order."""
    for item in items:
        if any(f in LOCKING_FIXTURES for f in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group(CPU_HEAVY_GROUP))
    yield
    if getattr(config.option, "loadgroup", False):
        _name_the_groups(items)
    if hasattr(config, "workerinput"):  # an xdist worker: hand out the slow tests first
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _name_the_groups(items: list[pytest.Item]) -> None:
    """What xdist's ``loadgroup`` does on a worker, done again where it had no effect: the
    group's name appended to each grouped test's id (``...::test@cpu_heavy``), which is how
    the controller sees the group. pytest >= 9.2 keeps an item's id in ``_id`` (a
    ``NodeId``); pytest-xdist 3.8 still writes the old ``_nodeid``, so its groups are
    silently lost (pytest-dev/pytest-xdist#1386, fix pending in #1388). Nothing to do where
    xdist's own suffix took."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9.2: xdist's own hook works
        return
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None or "@" in item.nodeid or not isinstance(getattr(item, "_id", None),
                                                                   NodeId):
            continue
        name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        item._id = NodeId.parse(f"{item.nodeid}@{name}")  # type: ignore[attr-defined]


@pytest.fixture
def cpu_heavy() -> Iterator[int]:
    """One CPU-bound end-to-end test at a time (a lock file shared by every pytest process,
    xdist's workers and other runs): the market's VMs outweigh every other process
    (docs/service.md), so two such tests at once would starve the servers and the CLI of a
    two-CPU machine. Yields the CPU a test pins its VMs to, when it pins them. Within one
    ``make test`` run they never wait for each other: they share one xdist group (above)."""
    import fcntl

    with open("/tmp/merkat-e2e-cpu.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield sorted(os.sched_getaffinity(0))[0]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Any, Any, dict[str, str]]]:
    """An in-process server (FastAPI TestClient over a Manager, no cgroups) with users alice
    (100 credits), bob (10) and the admin root: ``(client, manager, {name: key})``."""
    from fastapi.testclient import TestClient

    from merkat.service.api import create_app
    from merkat.service.backends import make_backend
    from merkat.service.config import load_config
    from merkat.service.db import open_store
    from merkat.service.manager import Manager

    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "bob": store.add_user("bob", budget=10_000_000),
            "root": store.add_user("root", admin=True)}
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, m, keys
    m.close()
