"""The backend seam is real live (issue 27 item 2): the local backend's ``apply`` returns an
``ApplyReport``; a create or a resume that fails once (a fault injected here) is retried by the
next period, with a ``vm-error`` event, a refund of the period it did not run, and the VM
started (and billed) in the next period; a create that keeps failing fails its platform."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.local import Launch, LocalBackend, Node, sandbox
from merkat.control.types import Action, Demand, Observation
from merkat.core.backend import ApplyReport, OpReport, Plan, VMPlacement
from merkat.service import admit
from merkat.service.manager import Manager, make_controller
from merkat.service.templates import parse

TEMPLATE = """\
name: g
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: sleep 60
    cpu: 1
    memory: 64
"""


@pytest.fixture
def m(world: tuple[Any, Manager, dict[str, str]]) -> Manager:
    """The shared in-process server's manager (conftest: no cgroups, ``max_restarts`` 3)."""
    return world[1]


def money(m: Manager) -> list[tuple[str, int]]:
    """Platform g's movements with the provider: (reason's first word, signed amount)."""
    return [(t.reason.split(":")[0].split()[0], t.amount if t.payee == m.config.provider else -t.amount)
            for t in sorted(m.store.ledger.history("app:g"), key=lambda t: t.id)
            if m.config.provider in (t.payer, t.payee)]


def events(m: Manager, *kinds: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["message"]) for e in m.store.events(limit=1000)
            if e["kind"] in kinds]


def flaky_spawn(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[int]:
    """The next ``failures`` process starts fail as a fork does under pressure (EAGAIN)."""
    real, left = sandbox.spawn, [failures]

    def spawn(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox, "spawn", spawn)
    return left


def test_apply_returns_a_report_of_every_operation(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none")
    b.register("a", lambda app, vm, i: Launch("sleep 30"))
    try:
        report = b.apply(Plan(3.0, 1.0, create=(VMPlacement("a/vm1", "a", 0),),
                              suspend=("a/vm9",)))
        assert isinstance(report, ApplyReport) and report.time == 3.0
        assert report.ops == (OpReport("suspend", "a/vm9", False, "unknown VM"),
                              OpReport("create", "a/vm1", True))
        assert [o.error for o in report.ops] == ["unknown VM", None]
        assert report.counts() == {"suspend-failed": 1, "create": 1}
    finally:
        b.close()


def test_a_create_that_fails_once_runs_in_the_next_period_and_is_not_billed_twice(
        m: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    flaky_spawn(monkeypatch, 1)
    m.submit("alice", parse(TEMPLATE))
    m.admit()
    m.tick()  # the create fails: reported, refunded, placed again
    record = m.platform.records[-1]
    assert record.created == 1 and record.failed == (
        "create g/vm1: cannot start 'sleep 60': [Errno 11] Resource temporarily unavailable",)
    assert "g/vm1" not in m.backend.vms  # type: ignore[attr-defined]
    charge = money(m)[0][1]
    assert charge > 0 and money(m) == [("charge", charge), ("refund", -charge)]
    m.tick()  # created now, and billed for this period only
    assert m.backend.describe("g/vm1")["process"] == "running"  # type: ignore[index]
    assert m.platform.records[-1].created == 1 and m.platform.records[-1].failed == ()
    assert money(m) == [("charge", charge), ("refund", -charge), ("charge", charge)]
    assert events(m, "vm-error", "refund", "vm-start", "charge") == [
        ("vm-error", "g/vm1: create failed: cannot start 'sleep 60': [Errno 11] Resource "
                     "temporarily unavailable"),
        ("refund", f"platform g: 1 VM(s) did not start; {charge / 1e6:g} refunded, started "
                   "again in the next period"),
        ("vm-start", "g/vm1: create"),
        ("charge", f"platform g paid {charge / 1e6:g} for 1 VM(s) in period "
                   f"{m.platform.index - 1}"),
    ]
    row = m.store.platform("g")
    assert row is not None and row.state == "running"
    assert m.store.ledger.audit().ok


def test_a_create_that_keeps_failing_fails_its_platform_and_its_money_goes_home(
        m: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    flaky_spawn(monkeypatch, 10)
    m.submit("alice", parse(TEMPLATE))
    m.admit()
    for _ in range(3):  # attempts 1-3: retried
        m.tick()
        assert m.store.platform("g").state == "running"  # type: ignore[union-attr]
    m.tick()  # attempt 4 > max_restarts (3): gone for good
    row = m.store.platform("g")
    assert row is not None and row.state == "failed"
    assert row.outcome == ("VM g/vm1 could not be created (4 attempts): cannot start "
                           "'sleep 60': [Errno 11] Resource temporarily unavailable")
    assert sum(a for _, a in money(m)) == 0  # it never ran: never billed
    assert m.store.ledger.balance("app:g") == 0 and m.store.ledger.audit().ok


class _SuspendThenResume:
    """A best-effort controller whose owner suspends it in its 2nd period, resumes it in its
    3rd."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, obs: Observation) -> Demand:
        self.calls += 1
        if self.calls == 2:
            return Demand(Action.SUSPEND, nvms=len(obs.vms), reason="suspend")
        if self.calls == 3:
            return self.inner.keep(obs, Action.RESUME, "resume")  # type: ignore[no-any-return]
        return self.inner.decide(obs)  # type: ignore[no-any-return]


def test_a_resume_that_fails_once_resumes_in_the_next_period(
        m: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admit, "make_controller",
                        lambda p, q: _SuspendThenResume(make_controller(p, q)))
    b: Any = m.backend
    real, left = b._resume, [1]

    def resume(vm: str, host: int) -> str | None:
        if left[0]:
            left[0] -= 1
            return "injected: the freezer did not answer"
        return real(vm, host)  # type: ignore[no-any-return]

    monkeypatch.setattr(b, "_resume", resume)
    m.submit("alice", parse(TEMPLATE))
    m.admit()
    m.tick()  # started
    m.tick()  # suspended
    assert b.describe("g/vm1")["process"] == "suspended"
    paid = sum(a for _, a in money(m))
    m.tick()  # the resume fails: refunded, resumed again next period
    assert m.platform.records[-1].failed == (
        "resume g/vm1: injected: the freezer did not answer",)
    assert b.describe("g/vm1")["process"] == "suspended"
    assert sum(a for _, a in money(m)) == paid
    m.tick()
    assert b.describe("g/vm1")["process"] == "running"
    assert m.platform.records[-1].resumed == 1 and m.platform.records[-1].failed == ()
    assert sum(a for _, a in money(m)) > paid
    kinds = [k for k, _ in events(m, "vm-start", "vm-suspend", "vm-error", "refund",
                                  "vm-resume")]
    assert kinds == ["vm-start", "vm-suspend", "vm-error", "refund", "vm-resume"]
    assert m.store.platform("g").state == "running"  # type: ignore[union-attr]
    assert m.store.ledger.audit().ok
