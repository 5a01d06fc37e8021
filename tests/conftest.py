"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Every Kubernetes API emulator the tests start (in this process or a subprocess) checks each
# request and answer against the pinned Kubernetes API schema (backends/kubernetes/schema.py):
# a field the real API server would reject fails the test that sent it.
os.environ.setdefault("MERKAT_KUBE_SCHEMA", "1")

# pytest-xdist's workers run with COLUMNS=80 (the controller's terminal), which would make the
# CLI's tables think they print to an 80-column terminal and cut cells; the CLI under test
# (in process or as a subprocess) prints as it does into a pipe, whatever runs the tests.
os.environ.pop("COLUMNS", None)


@pytest.fixture
def cpu_heavy() -> Iterator[int]:
    """One CPU-bound end-to-end test at a time (a lock file shared by every pytest process,
    xdist's workers and other runs): the market's VMs outweigh every other process
    (docs/service.md), so two such tests at once would starve the servers and the CLI of a
    two-CPU machine. Yields the CPU a test pins its VMs to, when it pins them."""
    import fcntl

    with open("/tmp/merkat-e2e-cpu.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield sorted(os.sched_getaffinity(0))[0]
