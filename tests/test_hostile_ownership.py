"""Hostile: a VM cannot move its cgroup out of its server's hands (or into another's) by
claiming another identity in a child's environment. A restarted server decides whose a VM
group is by its session leader, the wrapper shell the server started (docs/service.md, "Each
server owns its subtree")."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from merkat.backends.local import LocalBackend, Node
from merkat.backends.local.ownership import owned

ME, OTHER = "a1b2c3d4", "0ther000"


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def sleeper(procs: list[subprocess.Popen[bytes]], identity: str, leader: bool
            ) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(["sleep", "600"], start_new_session=leader,
                         env={**os.environ, "MERKAT_SERVER": identity})
    procs.append(p)
    return p


def test_a_child_claiming_another_identity_does_not_save_its_group(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    from test_local_backend import fake_v1

    fake_v1(tmp_path / "cg", ["mk", "mk/app", "mk/app/vm1", "mk/bapp", "mk/bapp/vm1"])
    mine, forged = sleeper(procs, ME, True), sleeper(procs, OTHER, False)
    theirs, forged_mine = sleeper(procs, OTHER, True), sleeper(procs, ME, False)
    (tmp_path / "cg/cpu/mk/app/vm1/cgroup.procs").write_text(f"{mine.pid}\n{forged.pid}\n")
    (tmp_path / "cg/cpu/mk/bapp/vm1/cgroup.procs").write_text(
        f"{theirs.pid}\n{forged_mine.pid}\n")
    assert owned([mine.pid, forged.pid], ME)
    assert not owned([theirs.pid, forged_mine.pid], ME)
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs",
                     cgroup_root=tmp_path / "cg", prefix="mk", identity=ME)
    assert b.reap_orphans() == ["app/vm1"]  # ours: destroyed, the forging child with it
    assert mine.wait(5) < 0 and forged.wait(5) < 0
    assert b.foreign == ["bapp/vm1"]  # another server's: its child's claim changes nothing
    assert theirs.poll() is None and forged_mine.poll() is None
