"""Charging by measured use (issue 26, Tycoon §3 live): the cgroups' CPU counters (fake v1/v2
trees and real ones), the meter per application, and the economy's settle-then-deposit."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from merkat.backends.local import LocalBackend, Node
from merkat.backends.local.cgroups import CgroupTree, Version, detect
from merkat.backends.local.metering import CpuMeter
from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import hold_account
from merkat.core.backend import Plan, VMPlacement
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy

M = 1_000_000


def test_v1_reads_cpuacct_usage_and_v2_reads_usage_usec(tmp_path: Path) -> None:
    v1 = tmp_path / "v1"
    for ctl in ("cpu", "cpuacct"):
        (v1 / ctl / "merkat" / "a" / "vm1").mkdir(parents=True)
        (v1 / ctl / "cgroup.procs").touch()
    (v1 / "cpuacct/merkat/a/vm1/cpuacct.usage").write_text("2500000000\n")
    tree = CgroupTree(v1)
    assert tree.version is Version.v1
    assert tree.cpu_usage("a/vm1") == 2.5
    assert tree.cpu_usage("a/vm2") is None  # no such group
    v2 = tmp_path / "v2"
    (v2 / "merkat/a/vm1").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory")
    (v2 / "merkat/a/vm1/cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\n")
    assert CgroupTree(v2).cpu_usage("a/vm1") == 1.25


def test_the_meter_gives_each_application_what_its_vms_used_since_the_last_reading(
        tmp_path: Path) -> None:
    v2 = tmp_path
    (v2 / "cgroup.controllers").write_text("cpu memory")
    tree = CgroupTree(v2)

    def set_usage(vm: str, seconds: float) -> None:
        d = v2 / "merkat" / vm
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.stat").write_text(f"usage_usec {round(seconds * 1e6)}\n")

    meter = CpuMeter(tree)
    set_usage("a/vm1", 1.0)
    set_usage("a/vm2", 0.5)
    set_usage("b/vm1", 9.0)
    meter.start("b/vm1", "b/vm1", adopted=True)  # adopted: counts from now
    vms = [("a/vm1", "a/vm1"), ("a/vm2", "a/vm2")]
    assert meter.take("a", vms) == 1.5
    assert meter.take("b", [("b/vm1", "b/vm1")]) == 0.0
    set_usage("a/vm1", 3.0)
    set_usage("a/vm2", 0.75)
    meter.close("a/vm2", "a", "a/vm2")  # destroyed: what it used until then is kept
    assert meter.take("a", vms[:1]) == 2.25
    assert meter.take("a", vms[:1]) == 0.0
    assert meter.take("c", []) is None


class Metered(SimBackend):
    """A simulated world whose applications each use ``rate`` cores, as a cgroup counts."""

    def __init__(self, rate: float) -> None:
        super().__init__(trade_memory=False, boot_s=0.0)
        self.rate = rate

    def cpu_used(self, app: str) -> float | None:
        return self.rate * 60.0


def test_by_measured_use_each_period_settles_the_last_deposit_then_deposits() -> None:
    ledger = MemoryLedger()
    platform = Platform(Hosts(("h0",), np.array([[1.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    spec = AppSpec(id="a", policy="best-effort", size=1, vm_size={"cpu": 1.0}, submit_time=0.0,
                   budget=100.0, trade=("cpu",), owner="alice")
    economy = Economy(ledger, charging="use", metered=True, return_budgets=True)
    backend = Metered(rate=0.25)
    d = Driver(platform, backend, economy, ListArrivals([Arrival(0.0, spec, RigidApp(
        vms=1, work_total=150.0))]))
    d.admit_due(0.0)
    r0 = d.step(0.0)
    app = platform.apps["a"]
    bid = app.vms[0].bid["cpu"]
    assert r0.charged == 0 and app.spent == 0  # deposited, nothing charged yet
    assert ledger.balance(hold_account("app:a")) == round(bid * M)
    price0 = r0.prices["cpu"]
    d.step(60.0)
    # 0.25 core for the 60 s period at that period's price; the rest of the deposit refunded
    assert app.spent == round(0.25 * 60.0 * price0 / 60.0 * M)
    assert app.spent < round(bid * M)
    d.run(start=120.0)
    assert not app.active
    assert ledger.balances(["app:a", hold_account("app:a")]) == {"app:a": 0,
                                                                  hold_account("app:a"): 0}
    assert ledger.balance("alice") == 100 * M - app.spent
    assert ledger.balance("provider") == app.spent
    assert ledger.audit().ok


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_real_cgroups_count_what_a_throttled_hog_used(tmp_path: Path, cpu_heavy: int) -> None:
    b = LocalBackend([Node("n0", str(cpu_heavy), 1.0, 1024.0)], tmp_path,
                     prefix=f"merkat-meter-{uuid.uuid4().hex[:8]}")
    assert b.enforced, b.warning
    from merkat.backends.local import Launch

    hog = "exec python3 -c 'while True: pass'"
    b.register("hog", lambda app, vm, i: Launch(hog, memory_floor=16))
    b.register("nap", lambda app, vm, i: Launch("sleep 600", memory_floor=16))
    alloc: dict[str, Any] = {"cpu": 0.3, "memory": 64.0}
    try:
        b.apply(Plan(0.0, 1.0, create=(VMPlacement("hog/vm1", "hog", 0),
                                       VMPlacement("nap/vm1", "nap", 0)),
                     allocations={"hog/vm1": alloc, "nap/vm1": alloc}))
        assert all(r.ok for r in b.report), b.report
        b.cpu_used("hog")
        start = time.monotonic()
        time.sleep(2.0)
        used = b.cpu_used("hog")
        elapsed = time.monotonic() - start
        assert used is not None and 0.15 * elapsed < used < 0.4 * elapsed, (used, elapsed)
        assert (b.cpu_used("nap") or 0.0) < 0.05
        time.sleep(0.5)
        b.apply(Plan(2.0, 1.0, destroy=("hog/vm1",)))
        last = b.cpu_used("hog")  # what it used until it was destroyed
        assert last is not None and 0.05 < last < 0.3, last
        assert b.cpu_used("hog") is None or b.cpu_used("hog") == 0.0
    finally:
        b.close()


def test_a_stop_settles_the_open_deposit_on_what_was_used_before_the_money_goes_home(
        ) -> None:
    ledger = MemoryLedger()
    platform = Platform(Hosts(("h0",), np.array([[1.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    spec = AppSpec(id="a", policy="best-effort", size=1, vm_size={"cpu": 1.0}, submit_time=0.0,
                   budget=100.0, trade=("cpu",), owner="alice")
    d = Driver(platform, Metered(rate=0.25), Economy(ledger, charging="use", metered=True,
                                                     return_budgets=True))
    d.submit(spec, RigidApp(vms=1, work_total=1e9))
    price0 = d.step(0.0).prices["cpu"]
    assert ledger.balance(hold_account("app:a")) > 0  # the period's deposit, open
    d.stop("a", "stopped by the user")  # the end rule: settled first, then home
    app = platform.apps["a"]
    assert app.spent == round(0.25 * 60.0 * price0 / 60.0 * M) > 0
    assert ledger.balances(["app:a", hold_account("app:a")]) == {"app:a": 0,
                                                                  hold_account("app:a"): 0}
    assert ledger.balance("alice") == 100 * M - app.spent
    assert ledger.balance("provider") == app.spent and ledger.audit().ok
