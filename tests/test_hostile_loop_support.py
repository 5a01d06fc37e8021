"""What the hostile-loop suites share (``tests/test_hostile_loop.py``,
``tests/test_hostile_monitors.py``): a manager on plain directories (no cgroups), the loop in a
thread as the server runs it, and a template that sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager

SLEEPER = """\
name: s
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: sleep 60
    cpu: 1
    memory: 64
"""


def _manager(tmp_path: Path, period: float = 0.5) -> Manager:
    cfg = load_config(None, data_dir=tmp_path, period=period, admission=period / 2,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    return Manager(cfg, store, make_backend(cfg))


@pytest.fixture(name="manager")
def manager_fixture(tmp_path: Path) -> Iterator[Manager]:
    m = _manager(tmp_path)
    yield m
    m.close()


class Loop:
    """``m.run`` in a thread, as the server runs it."""

    def __init__(self, m: Manager) -> None:
        self.m = m
        self.stop = threading.Event()
        self.thread = threading.Thread(target=m.run, args=(self.stop,), daemon=True)
        m.health.thread = self.thread
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def wait(cond: Callable[[], Any], timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out")


def broken(*_: Any, **__: Any) -> Any:
    raise OperationalError("INSERT", {}, Exception("database disk image is malformed"))
