"""Themis' derived deadline policies: Vertical-Deadline and Horizontal-Deadline (Fig. 4, §IV-A)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from merkat.control import (
    Action,
    Budget,
    HorizontalDeadline,
    Metrics,
    Observation,
    VerticalDeadline,
    VMState,
    VMView,
    make_policy,
)
from merkat.control.formulas import start_bid


def ob(**kw: object) -> Observation:
    base: dict[str, object] = dict(time=0.0, period=100.0, prices={"cpu": 1.0},
                                   capacity={"cpu": 10.0}, vm_size={"cpu": 1.0},
                                   budget=Budget(100.0), bid_min={"cpu": 0.01},
                                   deadline=1000.0,
                                   metrics=Metrics(work_total=500.0, ideal_rate=1.0))
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def running(alloc: float, bid: float, state: VMState = VMState.RUNNING) -> tuple[VMView, ...]:
    return (VMView("vm0", state, {"cpu": alloc}, {"cpu": bid}),)


# --- start: postpone, then abort ---------------------------------------------------------------


def test_starts_with_the_bid_that_buys_the_needed_progress() -> None:
    d = VerticalDeadline().decide(ob())
    assert d.action is Action.START
    assert d.nvms == 1
    # t_ideal 500 s of 1000 s left: half the VM; x = P·A/(1 - A/C)
    assert d.new_vm_bid == pytest.approx({"cpu": 0.5 / (1 - 0.5 / 10)})


def test_postpones_for_a_part_of_the_slack_then_starts() -> None:
    c = VerticalDeadline(postpone_fraction=0.1)
    d = c.decide(ob(budget=Budget(1.0)))  # bid_max 0.1 per period: too poor now
    assert d.action is Action.NONE
    assert c.next_try == pytest.approx(0.1 * (1000 - 500))
    assert c.decide(ob(time=40.0)).action is Action.NONE  # still postponed, whatever the price
    d = c.decide(ob(time=100.0))
    assert d.action is Action.START
    assert d.new_vm_bid == pytest.approx({"cpu": (500 / 900) / (1 - 500 / 900 / 10)})


def test_aborts_when_postponed_past_the_ideal_execution_time() -> None:
    d = VerticalDeadline().decide(ob(metrics=Metrics(work_total=1200.0, ideal_rate=1.0)))
    assert d.action is Action.STOP
    assert "aborted" in d.reason


# --- running: Fig. 4 lines 1-7 -----------------------------------------------------------------


def test_scale_one_vm_on_the_predicted_progress() -> None:
    c = VerticalDeadline()
    d = c.decide(ob(vms=running(0.4, 1.0),
                    metrics=Metrics(work_total=500.0, ideal_rate=1.0, progress_rate=0.4)))
    # p_est = 1 · 0.4 = 0.4 < p_ref = 500/1000: T = 0.2, bid × 1.2
    assert d.action is Action.NONE
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.2})
    # next period: EWMA(0.5) of 0.4 and 0.8 = 0.6 > p_ref = 460/900: decrease by 1 + T
    d = c.decide(ob(time=100.0, vms=running(0.8, 1.2),
                    metrics=Metrics(work_done=40.0, work_total=500.0, ideal_rate=1.0,
                                    progress_rate=0.8)))
    p_ref = 460 / 900
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.2 / (1 + (0.6 - p_ref) / p_ref)})


def test_halves_the_bid_at_maximum_allocation() -> None:
    d = VerticalDeadline().decide(ob(vms=running(1.0, 3.0)))
    assert d.bids["vm0"] == pytest.approx({"cpu": 1.5})
    d = VerticalDeadline().decide(ob(vms=running(1.0, 0.015)))
    assert d.bids["vm0"] == {"cpu": 0.01}  # never under bid_min


def test_suspends_when_the_budget_cannot_keep_the_progress() -> None:
    c = VerticalDeadline()
    metrics = Metrics(work_total=500.0, ideal_rate=1.0, progress_rate=0.4)
    # bid_max: 11 credits over 10 periods = 1.1 < the 1.2 Scale-One-VM wants
    d = c.decide(ob(budget=Budget(11.0), vms=running(0.4, 1.0), metrics=metrics))
    assert d.action is Action.SUSPEND
    # same situation with enough budget: no suspension
    d = VerticalDeadline().decide(ob(budget=Budget(13.0), vms=running(0.4, 1.0),
                                     metrics=metrics))
    assert d.action is Action.NONE


def test_resumes_after_the_wait_when_the_price_allows() -> None:
    c = VerticalDeadline(resume_wait=2)
    metrics = Metrics(work_total=500.0, ideal_rate=1.0, progress_rate=0.4)
    assert c.decide(ob(budget=Budget(11.0), vms=running(0.4, 1.0),
                       metrics=metrics)).action is Action.SUSPEND
    suspended = running(0.0, 1.0, VMState.SUSPENDED)
    assert c.decide(ob(time=100.0, budget=Budget(11.0), vms=suspended)).action is Action.NONE
    # the wait is over but the price is still the one it was suspended at (1.0): it waits
    d = c.decide(ob(time=200.0, budget=Budget(11.0), vms=suspended))
    assert d.action is Action.NONE and "has not dropped" in d.reason
    d = c.decide(ob(time=200.0, budget=Budget(11.0), prices={"cpu": 0.5}, vms=suspended))
    assert d.action is Action.RESUME  # 500 s of work, 800 s left: 62.5 % of the VM
    o = ob(time=200.0, budget=Budget(11.0), prices={"cpu": 0.5}, vms=suspended)
    assert d.bids["vm0"] == pytest.approx(start_bid(o, 0.625, 1))
    c2 = VerticalDeadline(resume_wait=0)
    d = c2.decide(ob(time=200.0, budget=Budget(1.0), prices={"cpu": 5.0}, vms=suspended))
    assert d.action is Action.NONE  # price still too high


def test_the_resume_wait_doubles_with_each_suspension() -> None:
    """Themis §IV-A resumes "when the price drops and enough time has passed"; a fixed wait
    made applications that cannot afford their share cycle every 3 periods (docs/control.md,
    decision on the resume wait): the k-th suspension waits resume_wait x 2^(k-1) periods."""
    c = VerticalDeadline(resume_wait=2)
    metrics = Metrics(work_total=500.0, ideal_rate=1.0, progress_rate=0.4)
    assert c.decide(ob(budget=Budget(11.0), vms=running(0.4, 1.0),
                       metrics=metrics)).action is Action.SUSPEND
    assert c.suspensions == 1 and c.suspend_cost == 1.0  # 1 CPU at price 1.0
    cheap, suspended = {"cpu": 0.5}, running(0.0, 1.0, VMState.SUSPENDED)
    for k, wait in ((1, 2), (2, 4), (3, 8)):
        c.suspensions, c.suspended_at = k, 0.0
        early = ob(time=(wait - 1) * 100.0, prices=cheap, vms=suspended, deadline=1e4)
        assert c.decide(early).action is Action.NONE
        on_time = ob(time=wait * 100.0, prices=cheap, vms=suspended, deadline=1e4)
        assert c.decide(on_time).action is Action.RESUME
        c.suspend_cost = 1.0


def test_aborts_while_suspended_once_the_deadline_is_out_of_reach() -> None:
    d = VerticalDeadline().decide(ob(time=600.0, vms=running(0.0, 1.0, VMState.SUSPENDED)))
    assert d.action is Action.STOP


def test_stops_when_finished() -> None:
    d = VerticalDeadline().decide(ob(vms=running(1.0, 1.0),
                                     metrics=Metrics(work_done=500.0, work_total=500.0)))
    assert (d.action, d.reason) == (Action.STOP, "finished")


# --- Horizontal-Deadline -----------------------------------------------------------------------


def farm(n: int, tasks: int, idle: int | None = None, **kw: object) -> Observation:
    vms = tuple(VMView(f"w{i}", VMState.RUNNING, {"cpu": 1.0}, {"cpu": 2.0}, busy=i != idle)
                for i in range(n))
    return ob(prices={"cpu": 2.0}, capacity={"cpu": 100.0}, vms=vms,
              metrics=Metrics(tasks_left=tasks, task_time_avg=60.0, task_time_max=100.0),
              **kw)


def test_horizontal_deadline_adds_workers_when_the_bound_exceeds_the_deadline() -> None:
    c = HorizontalDeadline()
    d = c.decide(farm(1, 10, deadline=300.0))  # ⌈9·60/1⌉ + 100 = 640 s > 300 s
    assert d.nvms == 2
    assert d.new_vm_bid == {"cpu": 2.0}  # alloc_ref · P
    d = c.decide(farm(2, 10, deadline=300.0))  # ⌈540/2⌉ + 100 = 370 > 300: +2
    assert d.nvms == 4
    d = c.decide(farm(4, 10, deadline=300.0))  # 235 s: between 225 and 300, hold
    assert d.nvms == 4


def test_horizontal_deadline_releases_idle_workers_when_well_ahead() -> None:
    d = HorizontalDeadline().decide(farm(3, 1, idle=1))  # 100 s bound, 1000 s left
    assert d.nvms == 2
    assert d.release == ("w1",)


def test_horizontal_deadline_without_task_information_holds() -> None:
    o = farm(2, 3)
    o = replace(o, metrics=Metrics())
    d = make_policy("horizontal-deadline").decide(o)
    assert d.nvms == 2
    assert d.release == ()


def test_abort_hopeless_stops_a_running_job_once_the_deadline_is_out_of_reach() -> None:
    # 500 s of work left at full speed, 400 s to the deadline: needed fraction 1.25
    late = ob(time=600.0, vms=running(1.0, 1.0),
              metrics=Metrics(work_done=0.0, work_total=500.0, ideal_rate=1.0,
                              progress_rate=1.0))
    d = VerticalDeadline(abort_hopeless=True).decide(late)
    assert d.action is Action.STOP
    assert d.reason == "aborted while running: the deadline can no longer be met"
    assert VerticalDeadline().decide(late).action is not Action.STOP  # Themis' rule: runs on
    on_time = replace(late, time=400.0)  # 600 s left: needed 0.83, it runs on
    assert VerticalDeadline(abort_hopeless=True).decide(on_time).action is not Action.STOP
    assert make_policy("vertical-deadline", abort_hopeless=True).abort_hopeless  # type: ignore[attr-defined]
