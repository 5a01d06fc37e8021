"""Crash and restart on a fake cgroup tree: a second manager on the same store and tree (the
first one "killed": never closed) re-adopts the running VM (same pid, its bid and node),
restarts the one whose group was emptied, keeps a frozen VM's platform suspended, thaws a VM
the store says runs, destroys the orphan group, and the period counter and the bank go on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from merkat.control.types import AppStatus, VMState
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import Store, open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse
from test_local_backend import fake_v1

SLEEP = """\
name: {name}
controller: {{policy: best-effort}}
budget: 10
clusters:
  - name: main
    command: exec sleep 600
    cpu: 0.5
    memory: 64
    min_memory: 16
"""

NAMES = ("run", "gone", "frz", "thaw")


def assert_recovery_events(m: Manager) -> None:
    """The recovery events of the scenario both backends' restart tests play: "run" re-adopted,
    "gone" started again, "frz" re-adopted suspended, the orphan "ghost" destroyed."""
    events = [e["message"] for e in m.store.events(limit=1000) if e["kind"] == "recovery"]
    assert any("run resumed" in e and "1 VM(s) re-adopted (0 frozen), 0 started again" in e
               for e in events)
    assert any("gone resumed" in e and "0 VM(s) re-adopted (0 frozen), 1 started again" in e
               for e in events)
    assert any("frz resumed" in e and "1 VM(s) re-adopted (1 frozen)" in e for e in events)
    assert any("destroyed 1 VM(s) no platform claims: ghost/vm1" in e for e in events)


def manager(tmp_path: Path) -> Manager:
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "cg"), "cgroup_prefix": "merkat",
                               "nodes": [{"name": "n0", "cpus": "0", "memory": 1024},
                                         {"name": "n1", "cpus": "1", "memory": 1024}]})
    return Manager(cfg, open_store(cfg.database), make_backend(cfg))


def procs(tmp_path: Path, group: str) -> Path:
    return tmp_path / "cg" / "cpu" / "merkat" / group / "cgroup.procs"


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def test_a_restarted_manager_readopts_restarts_and_cleans(
        tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]) -> None:
    fake_v1(tmp_path / "cg", ["merkat", *(f"merkat/{n}" for n in (*NAMES, "ghost", "other")),
                              *(f"merkat/{n}/vm1" for n in (*NAMES, "ghost", "other"))])
    m1 = manager(tmp_path)
    m1.store.add_user("alice", budget=100_000_000)
    for name in NAMES:
        m1.submit("alice", parse(SLEEP.format(name=name), "x.yaml"))
    m1.admit()
    m1.tick()
    m1.tick()
    assert all(m1.platform.apps[n].status is AppStatus.RUNNING for n in NAMES)
    # The kernel's part: each VM's pid in its group (the spawn joined it for real).
    pids = {}
    for name in NAMES:
        p = m1.backend.vms[f"{name}/vm1"]
        pids[name] = p.pid
        procs(tmp_path, f"{name}/vm1").write_text(f"{p.pid}\n")
    procs(tmp_path, "gone/vm1").write_text("")  # its processes ended with the server
    bids = {n: dict(m1.platform.apps[n].vms[0].bid) for n in NAMES}
    hosts = {n: m1.platform.apps[n].vms[0].host for n in NAMES}
    index = m1.platform.index
    spent = {n: m1.spent(n) for n in NAMES}
    assert spent["run"] > 0
    # The previous server had suspended "frz" (its group frozen, its state in the store);
    # "thaw"'s group is frozen but the store says it runs.
    store: Store = m1.store
    store.set_platform("frz", state="suspended")
    (row,) = store.vms("frz")
    store.save_vms({"frz": [type(row)(**{**row.__dict__, "state": "suspended"})]})
    for name in ("frz", "thaw"):
        (tmp_path / "cg/freezer/merkat" / name / "vm1/freezer.state").write_text("FROZEN")
    # an orphan of this server (its identity in its environment), and another server's VM
    # under the same prefix (its own identity), which is never this server's to destroy
    identity = m1.config.identity
    ghost = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**os.environ, "MERKAT_SERVER": identity})
    other = subprocess.Popen(["sleep", "600"], start_new_session=True,
                             env={**os.environ, "MERKAT_SERVER": "0ther000"})
    sleepers.extend([ghost, other])
    procs(tmp_path, "ghost/vm1").write_text(f"{ghost.pid}\n")
    procs(tmp_path, "other/vm1").write_text(f"{other.pid}\n")
    # each VM the server started carries its identity
    assert f"MERKAT_SERVER={identity}".encode() in Path(
        f"/proc/{pids['run']}/environ").read_bytes().split(b"\0")

    m2 = manager(tmp_path)  # m1 was "killed": never closed

    b = m2.backend
    run = b.vms["run/vm1"]
    assert (run.pid, run.adopted, run.state) == (pids["run"], True, "running")
    app = m2.platform.apps["run"]
    assert app.status is AppStatus.RUNNING and app.vm_count == 1
    (vm,) = app.vms
    assert (vm.id, vm.state, vm.host, vm.bid, vm.new) == ("run/vm1", VMState.RUNNING,
                                                         hosts["run"], bids["run"], False)
    assert b.tree.limits("run/vm1").cpu == pytest.approx(vm.alloc["cpu"], abs=0.01)
    gone = b.vms["gone/vm1"]
    assert gone.pid != pids["gone"] and not gone.adopted and gone.state == "running"
    assert m2.platform.apps["frz"].status is AppStatus.SUSPENDED
    assert m2.platform.apps["frz"].vms[0].state is VMState.SUSPENDED
    assert b.vms["frz/vm1"].state == "suspended" and b.tree.frozen("frz/vm1")
    assert b.vms["thaw/vm1"].state == "running" and not b.tree.frozen("thaw/vm1")
    assert ghost.wait(5) < 0  # the orphan's process killed
    assert other.poll() is None and (tmp_path / "cg/cpu/merkat/other/vm1").is_dir()  # not ours
    assert b.foreign == ["other/vm1"]
    assert m2.platform.index == index  # the period counter continues
    assert {n: m2.spent(n) for n in NAMES} == spent  # what each paid is counted on from there
    assert_recovery_events(m2)
    # The next period: no new VM, the counter goes on, the books balance.
    rec = m2.tick()
    assert rec["index"] == index
    assert m2.platform.apps["run"].vms[0].id == "run/vm1" and b.vms["run/vm1"].pid == pids["run"]
    # The adopted process ends with status 0 (its wrapper writes it): the platform finished.
    run.exit_file.write_text("0\n")
    old = m1.backend.vms["run/vm1"].proc  # the test's own child: killed and reaped
    assert old is not None
    os.killpg(old.pid, signal.SIGKILL)
    old.wait()
    procs(tmp_path, "run/vm1").write_text("")
    m2.tick()
    assert m2.platform.apps["run"].status is AppStatus.FINISHED
    assert m2.store.vms("run") == []  # an ended platform's VMs are forgotten
    assert m2.store.ledger.audit().ok
    m2.close()
    for p in m1.backend.vms.values():
        if p.proc is not None:
            with contextlib.suppress(OSError):
                os.killpg(p.proc.pid, signal.SIGKILL)
            p.proc.wait()
