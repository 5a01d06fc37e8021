"""Step 4 of a period (:mod:`merkat.platform.period`): from the market's clearing to the
backend's :class:`~merkat.platform.backend.Plan` and the bills.

Used by the period and by admissions between periods (:mod:`merkat.platform.admission`).
Pure: it updates the VM records it is given (host, allocation) and returns the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from merkat.control.types import VMState
from merkat.market import NO_HOST
from merkat.platform.backend import Plan, VMPlacement
from merkat.platform.model import App, AppConst, Ops, VMRecord, to_micro


def make_plan(
    now: float, period: float, runs: Sequence[tuple[App, list[VMRecord]]], result: Any,
    ops: Ops, starting_vms: list[VMRecord], moved: list[tuple[VMRecord, int]],
    const_of: Callable[[App], AppConst],
) -> Plan:
    """The backend's plan for ``runs`` (each application with the VMs it bids with, in the
    order the market saw them) placed by the clearing ``result``: VMs placed for the first
    time are created or resumed (and appended to ``starting_vms``), VMs on another host
    migrate (appended to ``moved`` with their source), every placed VM's allocation is
    updated in its record; ``ops`` adds the destroys and suspends decided before."""
    create: list[VMPlacement] = []
    resume: list[VMPlacement] = []
    migrate: list[tuple[str, int, int]] = []
    allocations: dict[str, dict[str, float]] = {}
    hosts: list[int] = result.host.tolist()
    cols: list[list[float]] = result.allocation.T.tolist()  # one list per resource
    i = 0
    for app, vms in runs:
        const = app.const or const_of(app)
        columns, zero = const.columns, const.zero
        one = len(columns) == 1 and columns[0][1] >= 0  # one resource (CPU-only markets)
        r0, c0 = (columns[0][0], cols[columns[0][1]]) if one else ("", [])
        for vm in vms:
            h = hosts[i]
            if h == NO_HOST:  # nowhere to go this period: stays queued, gets nothing
                if vm.alloc != zero:
                    vm.alloc = zero
                i += 1
                continue
            if vm.new:
                (resume if vm.state is VMState.RESUMING else create).append(
                    VMPlacement(vm.id, vm.app, h)
                )
                vm.new = False
                starting_vms.append(vm)
            elif h != vm.host:
                migrate.append((vm.id, vm.host, h))
                moved.append((vm, vm.host))
            vm.host = h
            old = vm.alloc  # kept when equal (the controller's view of it stays valid)
            if one:
                a0 = c0[i]
                if len(old) != 1 or old.get(r0) != a0:
                    vm.alloc = {r0: a0}
            else:
                alloc = {r: cols[k][i] if k >= 0 else 0.0 for r, k in columns}
                if alloc != old:
                    vm.alloc = alloc
            allocations[vm.id] = vm.alloc
            i += 1
    return Plan(
        time=now,
        period=period,
        destroy=tuple(ops.destroy),
        suspend=tuple(ops.suspend),
        create=tuple(create),
        resume=tuple(resume),
        migrate=tuple(migrate),
        allocations=allocations,
    )

def bills_of(
    runs: Sequence[tuple[App, list[VMRecord]]], prices: Mapping[str, float]
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """Per application (id order): its placed VMs' bids for the period (micro-credits,
    rounded per VM) and what they use at this period's prices (allocation x price, at most
    the bid)."""
    bills: dict[str, int] = {}
    usage: dict[str, int] = {}
    for app, vms in runs:
        last: dict[str, float] | None = None
        x = 0
        total = 0
        used = 0
        lastalloc: dict[str, float] | None = None
        u = 0
        for vm in vms:
            if vm.host != NO_HOST:
                if vm.bid is not last:
                    last = vm.bid
                    x = to_micro(sum(last.values()))
                if vm.alloc is not lastalloc:
                    lastalloc = vm.alloc
                    u = to_micro(sum(a * prices[r] for r, a in lastalloc.items()))
                total += x
                used += min(u, x)
        if last is not None:
            a = app.spec.id
            bills[a] = bills.get(a, 0) + total
            usage[a] = usage.get(a, 0) + used
    names = sorted(bills)
    return tuple((a, bills[a]) for a in names), tuple((a, usage[a]) for a in names)
