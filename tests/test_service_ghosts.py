"""No ghost running (issue 26; issue 25 items 10, 11 and the Low item on SIGTERM): a VM whose
process is gone for good, or that could never be created, fails its platform with the reason,
an event, and no charge from that period on; ``platform show`` never says ``running`` for a
dead process; a VM that finished while the server was down is not started again; shutting
down many VMs takes one grace period, not one per VM."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from merkat.backends.local import Launch, LocalBackend, Node, wait_for
from merkat.core.backend import Plan, VMPlacement
from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import ServiceConfig, load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse

TEMPLATE = """\
name: g
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: %s
    cpu: 1
    memory: 64
"""


def config(tmp_path: Path) -> ServiceConfig:
    return load_config(None, data_dir=tmp_path, period=5.0, admission=2.5,
                       backend={"cgroup_root": str(tmp_path / "no-cgroups"), "max_restarts": 1})


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Manager, TestClient, dict[str, str]]]:
    cfg = config(tmp_path)
    store = open_store(cfg.database)
    key = store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield m, c, {"Authorization": f"Bearer {key}"}
    m.close()


def charges(m: Manager) -> list[Any]:
    """The money platform g paid the provider, net of refunds, per transfer."""
    return [t for t in m.store.ledger.history("app:g")
            if m.config.provider in (t.payer, t.payee)]


def test_a_vm_whose_restarts_are_used_up_fails_its_platform_and_stops_paying(
        world: tuple[Manager, TestClient, dict[str, str]]) -> None:
    m, c, auth = world
    m.submit("alice", parse(TEMPLATE % '"sleep 0.3; exit 3"'))
    m.admit()
    m.tick()
    assert m.store.platform("g").state == "running"  # type: ignore[union-attr]
    wait_for(lambda: m.backend.vms["g/vm1"].proc.poll() is not None, 5)  # type: ignore[union-attr]
    # dead since the last health check: not shown as running
    (vm,) = c.get("/api/v1/platforms/g", headers=auth).json()["vms"]
    assert vm["state"] == "dead" and vm["process"] == "dead"
    m.tick()  # restart 1 of 1
    paid = sum(t.amount for t in charges(m))
    wait_for(lambda: m.backend.vms["g/vm1"].proc.poll() is not None, 5)  # type: ignore[union-attr]
    m.tick()  # used up: failed, before this period's charge
    row = m.store.platform("g")
    assert row is not None and row.state == "failed"
    assert row.outcome == "VM g/vm1 exited with code 3 after 1 restarts"
    assert sum(t.amount for t in charges(m)) == paid  # nothing charged in that period
    m.tick()
    assert sum(t.amount for t in charges(m)) == paid  # nor after
    show = c.get("/api/v1/platforms/g", headers=auth).json()
    assert show["state"] == "failed" and show["vms"] == []
    events = {e["kind"]: e["message"] for e in m.store.events(limit=1000)}
    assert events["vm-failed"].startswith("g/vm1: exited with code 3 after 1 restarts; "
                                          "platform g failed")
    assert "running -> failed" in events["state"]
    assert m.store.ledger.balance("app:g") == 0  # its money went home
    assert m.store.ledger.audit().ok


def test_a_vm_that_cannot_be_created_fails_at_once_and_is_never_billed(
        world: tuple[Manager, TestClient, dict[str, str]]) -> None:
    m, _, _ = world
    text = TEMPLATE % "sleep 60" + "    files_in: [missing-input.dat]\n"
    m.submit("alice", parse(text))
    m.admit()
    before = m.store.ledger.balance("alice")
    m.tick()
    row = m.store.platform("g")
    assert row is not None and row.state == "failed"
    assert "could not be created" in (row.outcome or "")
    assert "missing-input.dat" in (row.outcome or "")
    net = sum(t.amount if t.payee == m.config.provider else -t.amount for t in charges(m))
    assert net == 0  # the period's charge was refunded: a VM that never ran is never billed
    assert m.store.ledger.balance("alice") == before + 50_000_000  # the whole budget back
    assert any(e["kind"] == "vm-failed" and "refunded" in e["message"]
               for e in m.store.events(limit=1000))
    assert m.store.ledger.audit().ok


def test_a_vm_that_finished_while_the_server_was_down_is_not_started_again(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    marks = m.tenants.identity("alice").home / "marks"  # the VM writes in its owner's area
    m.submit("alice", parse(TEMPLATE % '"echo started >> $HOME/marks; sleep 1"'))
    m.admit()
    m.tick()
    assert m.store.platform("g").state == "running"  # type: ignore[union-attr]
    exit_file = m.backend.vms["g/vm1"].exit_file
    # the server dies (its VM goes on and ends with status 0 while it is down)
    m.monitors.close()
    assert wait_for(lambda: exit_file.exists() and exit_file.read_text().strip() == "0", 10)
    store2 = open_store(cfg.database)
    m2 = Manager(cfg, store2, make_backend(cfg))
    try:
        assert m2.backend.describe("g/vm1")["process"] == "exited"  # type: ignore[index]
        rec = [e["message"] for e in store2.events(limit=1000) if e["kind"] == "recovery"]
        assert any("1 finished while the server was down" in e for e in rec)
        for _ in range(3):
            m2.tick()
            if store2.platform("g").state == "finished":  # type: ignore[union-attr]
                break
        assert store2.platform("g").state == "finished"  # type: ignore[union-attr]
        time.sleep(0.3)
        assert marks.read_text() == "started\n"  # its work ran (and was paid) once
    finally:
        m2.close()


def test_the_backend_reports_vms_gone_for_good(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none",
                     max_restarts=1)

    def bad_setup() -> None:
        raise FileNotFoundError("no input.dat")

    gone = tmp_path / "gone"
    gone.mkdir()
    b.register("a", lambda app, vm, i: Launch("sleep 0.2; exit 1", cwd=str(gone)))
    b.register("b", lambda app, vm, i: Launch("sleep 60", setup=bad_setup))
    b.apply(Plan(0.0, 1.0, create=(VMPlacement("a/vm1", "a", 0), VMPlacement("b/vm1", "b", 0))))
    assert b.failed() == {"b/vm1": "could not be created: cannot prepare VM: no input.dat"}
    gone.rmdir()  # its restart cannot start (its working directory is gone)
    wait_for(lambda: bool(b.poll()) or "a/vm1" in b.failed(), 5)
    assert b.failed()["a/vm1"].startswith("exited with code 1; restart failed: cannot start")
    assert b.describe("a/vm1")["process"] == "failed"  # type: ignore[index]
    b.apply(Plan(0.0, 1.0, destroy=("a/vm1", "b/vm1")))
    assert b.failed() == {}
    b.close()


def test_an_empty_group_whose_exit_file_says_0_is_adopted_as_finished(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none")
    b.register("a", lambda app, vm, i: Launch("echo again >> again", index=i, cwd=str(tmp_path)))
    b.monitored["a"] = "a/vm1"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "vm1.exit").write_text("0\n")
    r = b.adopt("a/vm1", "a", 0, 0)
    assert r.op == "adopt-exited" and r.error is None
    assert b.finished("a") and b.poll() == []
    (tmp_path / "a" / "vm1.exit").write_text("1\n")  # a VM that failed while we were down
    b.vms.clear()
    assert b.adopt("a/vm1", "a", 0, 0).op == "restart"  # is started again
    b.close()


@pytest.mark.parametrize("cgroups", [
    False, pytest.param(True, marks=pytest.mark.root)])
def test_shutdown_destroys_many_vms_in_parallel(tmp_path: Path, cgroups: bool) -> None:
    import os
    import uuid

    if cgroups and os.geteuid() != 0:
        pytest.skip("needs root (real cgroups)")
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path,
                     cgroup_root=None if cgroups else tmp_path / "none",
                     prefix=f"merkat-close-{uuid.uuid4().hex[:8]}")
    if cgroups and not b.enforced:
        pytest.skip("cgroups not writable")
    # each VM ignores SIGTERM: one by one, each would cost the 2 s grace
    b.register("a", lambda app, vm, i: Launch("trap '' TERM; sleep 60.2718 & wait"))
    n = 20
    b.apply(Plan(0.0, 1.0, create=tuple(VMPlacement(f"a/vm{k}", "a", 0) for k in range(n))))
    procs = [p.proc for p in b.vms.values()]
    time.sleep(0.3)
    t = time.monotonic()
    b.close()
    took = time.monotonic() - t
    assert took < 5.0, took  # ~2 s (one grace period), not 20 x 2 s
    assert all(p is not None and p.poll() is not None for p in procs)
    assert b.vms == {}
    assert wait_for(lambda: not _running("60.2718"), 3)  # nothing left behind


def _running(marker: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    stat = (d / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        out.append(d.name)
            except OSError:
                continue
    return out
