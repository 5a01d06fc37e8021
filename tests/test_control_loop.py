"""Closed loops on a toy market: the policies meet a feasible deadline, suspend through a price
spike and resume, and a task farm scales out and back in. The toy market is proportional share
on one resource: the others bid ``others`` credits per period in total, a VM bidding x gets
min(size, x/(x + others)·C); progress is proportional to the allocation."""

from __future__ import annotations

from collections.abc import Callable

from merkat.control import (
    Action,
    Budget,
    Controller,
    Metrics,
    Observation,
    VMState,
    VMView,
    make_policy,
)

C, PERIOD = 4.0, 100.0


def run_rigid(ctl: Controller, others: Callable[[int], float], work: float, deadline: float,
              balance: float, periods: int = 60) -> tuple[list[Action], float, float | None]:
    """Run a one-VM rigid application; returns (actions, credits spent, finish time)."""
    done, spent, state, bid, alloc = 0.0, 0.0, None, 0.0, 0.0
    actions: list[Action] = []
    price = others(0) / C
    for k in range(periods):
        t = k * PERIOD
        vms = () if state is None else (VMView("vm0", state, {"cpu": alloc}, {"cpu": bid}),)
        rate = alloc  # ideal rate 1 work unit/s at a full core
        obs = Observation(time=t, period=PERIOD, prices={"cpu": price}, capacity={"cpu": C},
                          vm_size={"cpu": 1.0}, budget=Budget(balance - spent),
                          bid_min={"cpu": 0.01}, vms=vms, deadline=deadline,
                          metrics=Metrics(work_done=done, work_total=work, ideal_rate=1.0,
                                          progress_rate=rate if state else None))
        d = ctl.decide(obs)
        actions.append(d.action)
        if d.action is Action.STOP:
            return actions, spent, t if done >= work else None
        if d.action in (Action.START, Action.RESUME, Action.NONE) and (
                state is VMState.RUNNING or d.action is not Action.NONE):
            state = VMState.RUNNING
            bid = d.bid_for("vm0")["cpu"]
        if d.action is Action.SUSPEND:
            state = VMState.SUSPENDED
        o = others(k)
        if state is VMState.RUNNING:
            alloc = min(1.0, bid / (bid + o) * C)
            spent += bid
            done = min(work, done + alloc * PERIOD)
        else:
            alloc = 0.0
        price = (o + (bid if state is VMState.RUNNING else 0.0)) / C
    return actions, spent, None


def test_deadline_strict_meets_a_feasible_deadline_without_spending_everything() -> None:
    # 3000 s of work at full speed, deadline 5000 s; the others bid 6 credits (price 1.5)
    actions, spent, finish = run_rigid(make_policy("deadline-strict"), lambda k: 6.0,
                                       work=3000.0, deadline=5000.0, balance=500.0)
    assert actions[0] is Action.START
    assert finish is not None and finish <= 5000.0
    assert spent < 500.0


def test_vertical_deadline_meets_a_feasible_deadline() -> None:
    actions, _, finish = run_rigid(make_policy("vertical-deadline"), lambda k: 6.0,
                                       work=3000.0, deadline=5000.0, balance=500.0)
    assert finish is not None and finish <= 5000.0
    assert Action.SUSPEND not in actions


def test_deadline_strict_suspends_through_a_price_spike_and_resumes() -> None:
    def others(k: int) -> float:
        return 400.0 if 5 <= k < 12 else 2.0

    actions, _, finish = run_rigid(make_policy("deadline-strict", seed=1), others,
                                   work=1500.0, deadline=5800.0, balance=60.0)
    assert Action.SUSPEND in actions
    assert Action.RESUME in actions
    assert actions.index(Action.SUSPEND) < actions.index(Action.RESUME)
    assert finish is not None and finish <= 5800.0


def test_deadline_strict_stops_when_a_spike_makes_the_deadline_unreachable() -> None:
    actions, _, finish = run_rigid(make_policy("deadline-strict", seed=1),
                                   lambda k: 400.0 if k >= 3 else 2.0,
                                   work=2500.0, deadline=3000.0, balance=60.0)
    assert finish is None
    assert actions[-1] is Action.STOP


def test_horizontal_deadline_scales_a_task_farm_out_and_in() -> None:
    ctl = make_policy("horizontal-deadline")
    tasks, t_task, deadline = 400, 60.0, 3000.0
    workers: list[str] = []
    counts = []
    nxt = 0
    for k in range(40):
        t = k * PERIOD
        vms = tuple(VMView(w, VMState.RUNNING, {"cpu": 1.0}, {"cpu": 1.0}) for w in workers)
        obs = Observation(time=t, period=PERIOD, prices={"cpu": 0.5}, capacity={"cpu": 200.0},
                          vm_size={"cpu": 1.0}, budget=Budget(1e4), deadline=deadline,
                          vms=vms, metrics=Metrics(tasks_left=tasks, task_time_avg=t_task,
                                                   task_time_max=t_task))
        d = ctl.decide(obs)
        if d.action is Action.START or d.nvms > len(workers):
            for _ in range(d.nvms - len(workers)):
                workers.append(f"w{nxt}")
                nxt += 1
        else:
            workers = [w for w in workers if w not in d.release][: d.nvms]
        counts.append(len(workers))
        tasks = max(0, tasks - int(len(workers) * PERIOD / t_task))
        if tasks == 0:
            break
    assert tasks == 0 and k * PERIOD <= deadline
    peak = max(counts)
    assert peak > 4  # it scaled out
    assert counts[-1] < peak  # and back in as the queue drained
