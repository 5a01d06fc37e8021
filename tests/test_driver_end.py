"""An application's end outside a period (issue 27 item 1): ``Driver.stop`` ends it through the
platform's end rule and the lifecycle table (its owner's STOP, or a failure of the world), its
VMs destroyed at once; a destroy the backend fails is re-issued by the next period; its money
goes home with ``return_budgets``; the live economy funds a budget from what the owner holds."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.errors import BankError
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.control.types import AppStatus
from merkat.core.backend import ApplyReport, OpReport, Plan
from merkat.core.period import AppSpec, Platform
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.runtime.economy import Economy


class _FlakyDestroy(SimBackend):
    """A simulated world whose first destroy of each VM fails."""

    def __init__(self) -> None:
        super().__init__(trade_memory=False, boot_s=0.0)
        self.plans: list[Plan] = []
        self.refused: set[str] = set()

    def apply(self, plan: Plan) -> ApplyReport:
        self.plans.append(plan)
        fail = tuple(v for v in plan.destroy if v not in self.refused)
        self.refused |= set(fail)
        report = super().apply(Plan(plan.time, plan.period,
                                    destroy=tuple(v for v in plan.destroy if v not in fail),
                                    suspend=plan.suspend, create=plan.create,
                                    resume=plan.resume, migrate=plan.migrate,
                                    allocations=plan.allocations))
        return ApplyReport(plan.time, report.ops + tuple(
            OpReport("destroy", v, False, "injected") for v in fail))


def setup(backend: SimBackend, **economy: bool) -> tuple[Driver, MemoryLedger]:
    ledger = MemoryLedger()
    platform = Platform(Hosts(("h0",), np.array([[4.0, 4096.0]])), period=60.0,
                        reserve={"cpu": 0.01})
    return Driver(platform, backend, Economy(ledger, **economy)), ledger


def spec(app_id: str, budget: float = 10.0) -> AppSpec:
    return AppSpec(id=app_id, policy="best-effort", size=2, vm_size={"cpu": 1.0},
                   submit_time=0.0, budget=budget, trade=("cpu",), owner="alice")


def test_a_stop_destroys_the_vms_at_once_and_a_failed_destroy_is_reissued() -> None:
    backend = _FlakyDestroy()
    d, ledger = setup(backend, return_budgets=True)
    d.submit(spec("a"), RigidApp(vms=2, work_total=1e9))
    d.step(0.0)
    assert [vm.state.value for vm in d.platform.apps["a"].vms] == ["running", "running"]
    report = d.stop("a", "stopped by the user")
    app = d.platform.apps["a"]
    assert (app.status, app.reason, app.outcome, app.vms) == (
        AppStatus.STOPPED, "stopped by the user", "stopped", [])
    assert "a" not in d.platform.active
    assert backend.plans[-1].destroy == ("a/vm1", "a/vm2")
    assert report.counts() == {"destroy-failed": 2}
    assert ledger.balance("app:a") == 0  # its money went home (return_budgets)
    assert ledger.balance("alice") == 10_000_000 - sum(
        t.amount for t in ledger.history("app:a") if t.payee == "provider")
    d.step(60.0)  # the next period destroys them again
    assert backend.plans[-1].destroy == ("a/vm1", "a/vm2") and not backend.vms
    with pytest.raises(ValueError, match="stop refused while stopped"):
        d.stop("a", "again")
    assert ledger.audit().ok


def test_a_failure_of_the_world_ends_an_application_as_failed_with_the_extra_vm() -> None:
    backend = _FlakyDestroy()
    d, _ = setup(backend)
    d.submit(spec("a"), RigidApp(vms=2, work_total=1e9))
    d.step(0.0)
    d.stop("a", "VM a/vm9 vanished", failed=True, also=("a/vm9",))
    app = d.platform.apps["a"]
    assert (app.status, app.outcome, app.reason) == (AppStatus.FAILED, "failed",
                                                     "VM a/vm9 vanished")
    assert backend.plans[-1].destroy == ("a/vm1", "a/vm2", "a/vm9")


def test_a_waiting_application_stops_without_calling_the_backend() -> None:
    backend = _FlakyDestroy()
    d, _ = setup(backend)
    d.submit(spec("w"), RigidApp(vms=2, work_total=1.0))
    assert d.stop("w", "stopped by the user") == ApplyReport(d.clock.now())
    assert backend.plans == [] and d.platform.queued() == []
    assert d.platform.apps["w"].status is AppStatus.STOPPED


def test_the_economy_for_moves_a_budget_from_what_the_owner_holds() -> None:
    d, ledger = setup(SimBackend(trade_memory=False), owner_funds=True)
    ledger.create_account("alice", AccountKind.user)
    ledger.mint("alice", 15_000_000, "her money")
    d.submit(spec("a", budget=10.0), RigidApp(vms=1, work_total=1.0), account="app:a@2")
    assert ledger.balance("app:a@2") == 10_000_000 and ledger.balance("alice") == 5_000_000
    (t,) = [t for t in ledger.history("app:a@2")]
    assert (t.payer, t.reason) == ("alice", "budget of a")
    with pytest.raises(BankError):  # she has 5 left: nothing moves, nothing is minted
        d.submit(spec("b", budget=10.0), RigidApp(vms=1, work_total=1.0))
    assert ledger.balance("alice") == 5_000_000 and ledger.audit().ok
    assert "b" not in d.platform.apps and [a.spec.id for a in d.platform.queued()] == ["a"]
