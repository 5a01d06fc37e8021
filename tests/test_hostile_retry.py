"""A retried destroy of an ended platform's VM never reaches the next platform of its name
(docs/service.md, "Deleting a platform"): VM ids are ``NAME/vmN`` in every backend (the
local backend's table, the Kubernetes pod's name), so while a destroy of a VM of ``NAME``
the backend failed is still re-issued every period, the name is not free — ``platform
delete`` answers 409 naming the VMs, and a new application of that id is refused by the
platform itself. And a name used again at once is billed to its own account."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.memory import MemoryLedger
from merkat.core.backend import ApplyReport, OpReport, Plan
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy
from test_hostile_tenancy import submit, template
from test_service_api import h


class _Stuck(SimBackend):
    """A simulated world whose destroys fail (the VM stays) while ``stuck``."""

    def __init__(self) -> None:
        super().__init__(trade_memory=False, boot_s=0.0)
        self.stuck = False
        self.plans: list[Plan] = []

    def apply(self, plan: Plan) -> ApplyReport:
        self.plans.append(plan)
        fail = plan.destroy if self.stuck else ()
        report = super().apply(Plan(plan.time, plan.period, destroy=(), suspend=plan.suspend,
                                    create=plan.create, resume=plan.resume,
                                    migrate=plan.migrate, allocations=plan.allocations)
                               if fail else plan)
        return ApplyReport(plan.time, report.ops + tuple(
            OpReport("destroy", v, False, "injected") for v in fail))


def spec(owner: str) -> AppSpec:
    return AppSpec(id="app", policy="best-effort", size=1, vm_size={"cpu": 1.0},
                   submit_time=0.0, budget=10.0, trade=("cpu",), owner=owner)


def driver(backend: SimBackend) -> Driver:
    platform = Platform(Hosts(("h0",), np.array([[4.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    return Driver(platform, backend, Economy(MemoryLedger()))


def test_an_id_with_a_destroy_pending_is_not_taken_again_by_the_platform() -> None:
    backend = _Stuck()
    d = driver(backend)
    d.submit(spec("alice"), RigidApp(vms=1, work_total=1e9))
    d.step(0.0)
    backend.stuck = True
    assert d.stop("app", "stopped").counts() == {"destroy-failed": 1}
    d.platform.forget(["app"])  # (its pending destroy stays: Platform.forget)
    assert d.platform.pending("app") == ("app/vm1",)
    with pytest.raises(ValueError, match=r"application 'app': the destroy of its VM app/vm1 "
                       r"failed and is retried every period"):
        d.submit(spec("bob"), RigidApp(vms=1, work_total=1e9), account="app:app@2")
    d.step(60.0)  # still failing: re-issued again
    assert backend.plans[-1].destroy == ("app/vm1",) and not backend.plans[-1].create
    backend.stuck = False
    d.step(120.0)  # done: the name is free
    assert backend.plans[-1].destroy == ("app/vm1",) and not backend.vms
    assert d.platform.pending("app") == ()
    d.submit(spec("bob"), RigidApp(vms=1, work_total=1e9), account="app:app@2")
    d.step(180.0)
    d.step(240.0)  # bob's VM runs, nothing of the first one's destroys reaches it
    assert [p.destroy for p in backend.plans[-2:]] == [(), ()]
    assert sorted(backend.vms) == ["app/vm1"] and backend.vms["app/vm1"].app == "app"
    assert [vm.state.value for vm in d.platform.apps["app"].vms] == ["running"]


def test_delete_is_refused_while_a_destroy_of_its_vm_is_retried(world: Any) -> None:
    c, m, keys = world
    assert submit(c, keys["alice"], template("app")).status_code == 201
    m.admit()
    m.tick()
    b = m.backend
    first = b.vms["app/vm1"]
    real, stuck = b._destroy, [True]

    def destroy(vm: str) -> str | None:  # the backend cannot destroy it (the VM stays)
        return "injected: the backend cannot destroy it now" if stuck[0] else real(vm)

    b._destroy = destroy
    r = c.post("/api/v1/platforms/app/stop", headers=h(keys["alice"]))
    assert r.status_code == 200 and r.json()["state"] == "stopped"
    r = c.delete("/api/v1/platforms/app", headers=h(keys["alice"]))
    assert r.status_code == 409, r.text
    assert r.json()["detail"] == (
        "platform 'app' is stopped but its VM app/vm1 is not destroyed yet (the backend "
        "failed to, and it is retried every period): delete it once it is (merkat events "
        "--platform app says when)")
    # the name stays taken: another user's platform of that name is refused
    assert submit(c, keys["bob"], template("app", "1")).status_code == 409
    m.tick()  # still failing
    assert c.delete("/api/v1/platforms/app", headers=h(keys["alice"])).status_code == 409
    stuck[0] = False
    m.tick()  # destroyed: the name is free
    assert first.proc is None or first.proc.poll() is not None
    assert c.delete("/api/v1/platforms/app", headers=h(keys["alice"])).status_code == 200
    assert submit(c, keys["bob"], template("app", "1")).status_code == 201
    m.admit()
    m.tick()
    second = b.vms["app/vm1"]
    m.tick()
    m.tick()  # bob's VM is his and alive, no retry reached it
    assert b.vms["app/vm1"] is second and second.proc.poll() is None
    assert m.store.platform("app").owner == "bob"  # type: ignore[union-attr]
    assert m.store.platform("app").state == "running"  # type: ignore[union-attr]


def test_a_name_used_again_at_once_is_billed_to_its_own_account(world: Any) -> None:
    """The normal path: the destroy succeeds, the platform is deleted and its name submitted
    again before the next period, whose bills are the same as the last one's (one VM at the
    same bid): the new platform pays from ``app:NAME@2`` and runs (it was billed to the first
    one's emptied ``app:NAME``, unpaid, and stayed waiting while the bills did not change)."""
    c, m, keys = world
    assert submit(c, keys["alice"], template("app")).status_code == 201
    m.admit()
    m.tick()
    first = m.backend.vms["app/vm1"]
    assert c.post("/api/v1/platforms/app/stop", headers=h(keys["alice"])).status_code == 200
    assert m.platform.pending("app") == ()
    assert c.delete("/api/v1/platforms/app", headers=h(keys["alice"])).status_code == 200
    assert submit(c, keys["alice"], template("app", "5")).status_code == 201
    m.admit()
    m.tick()
    assert m.platform.records[-1].unpaid == ()
    assert m.store.platform("app").state == "running"  # type: ignore[union-attr]
    assert m.backend.vms["app/vm1"] is not first and first.proc.poll() is not None
    paid = [t for t in m.store.ledger.history("app:app@2") if t.payee == m.config.provider]
    assert paid and m.store.ledger.balance("app:app") == 0


def test_a_failed_suspend_of_a_vm_the_plan_destroys_is_not_issued_again() -> None:
    """A suspend the backend failed is re-issued next period, unless the same plan destroys
    the VM (its platform ended): re-issued then, it fails for ever ("unknown VM") and would
    reach the next VM of that id, another platform's of its name."""
    from merkat.core.commit import settle
    from merkat.core.model import Charged, Decision

    plan = Plan(60.0, 60.0, destroy=("app/vm1",), suspend=("app/vm1", "other/vm1"))
    report = ApplyReport(60.0, (OpReport("destroy", "app/vm1", True),
                                OpReport("suspend", "app/vm1", False, "unknown VM"),
                                OpReport("suspend", "other/vm1", False, "injected")))
    decision = Decision(1, 60.0, plan, (), (), (), {}, {}, 0)
    failures, retry = settle({}, decision, report, Charged({}, frozenset(), 0))
    assert failures == ["suspend app/vm1: unknown VM", "suspend other/vm1: injected"]
    assert retry.suspend == ["other/vm1"] and retry.destroy == []
