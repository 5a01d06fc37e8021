"""Step 4 of a period (:mod:`merkat.platform.period`): from the market's clearing to the
backend's :class:`~merkat.platform.backend.Plan` and the bills.

Used by the period and by admissions between periods (:mod:`merkat.platform.admission`).
Pure: it updates the VM records it is given (host, allocation) and returns the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from merkat.control.types import VMState
from merkat.market import NO_HOST, RESOURCES
from merkat.market.share import FloatArray, IntArray
from merkat.market.types import row_sum
from merkat.platform.backend import Plan, VMPlacement
from merkat.platform.model import MICRO, App, AppConst, Ops, VMRecord


def make_plan(
    now: float, period: float, runs: Sequence[tuple[App, list[VMRecord]]], result: Any,
    ops: Ops, starting_vms: list[VMRecord], moved: list[tuple[VMRecord, int]],
    const_of: Callable[[App], AppConst], before: IntArray,
) -> Plan:
    """The backend's plan for ``runs`` (each application with the VMs it bids with, in the
    order the market saw them, on hosts ``before``: the market's input) placed by the
    clearing ``result``: VMs placed for the first time are created or resumed (and appended
    to ``starting_vms``), VMs on another host migrate (appended to ``moved`` with their
    source), every placed VM's allocation is updated in its record; ``ops`` adds the destroys
    and suspends decided before.

    The VMs whose host changes (placed for the first time, moved, or not placed: a new VM
    has no host, :class:`~merkat.platform.model.VMRecord`) are found with numpy and visited
    alone; the others only take their allocation, application by application."""
    create: list[VMPlacement] = []
    resume: list[VMPlacement] = []
    migrate: list[tuple[str, int, int]] = []
    allocations: dict[str, dict[str, float]] = {}
    host = result.host
    unplaced = host == NO_HOST
    hosts: list[int] = host.tolist()
    flat = [vm for _, vms in runs for vm in vms]
    for i in np.flatnonzero(unplaced | (host != before)).tolist():
        vm, h = flat[i], hosts[i]
        if h == NO_HOST:  # nowhere to go this period: stays queued (its allocation: below)
            continue
        if vm.new:
            (resume if vm.state is VMState.RESUMING else create).append(
                VMPlacement(vm.id, vm.app, h)
            )
            vm.new = False
            starting_vms.append(vm)
        else:
            migrate.append((vm.id, vm.host, h))
            moved.append((vm, vm.host))
        vm.host = h
    cols: list[list[float]] = result.allocation.T.tolist()  # one list per resource
    some_unplaced = bool(unplaced.any())
    i = 0
    for app, vms in runs:
        const = app.const or const_of(app)
        columns, zero = const.columns, const.zero
        j = i + len(vms)
        placed = vms
        rows: Sequence[int] = range(i, j)
        if some_unplaced and unplaced[i:j].any():
            placed = []
            for vm, h in zip(vms, hosts[i:j], strict=True):
                if h == NO_HOST:  # gets nothing
                    if vm.alloc != zero:
                        vm.alloc = zero
                else:
                    placed.append(vm)
            rows = [k for k in rows if hosts[k] != NO_HOST]
        # a VM's allocation mapping is kept when equal (the controller's view stays valid)
        if len(columns) == 1 and columns[0][1] >= 0:  # one resource (CPU-only markets)
            r0, c0 = columns[0][0], cols[columns[0][1]]
            for vm, a0 in zip(placed, [c0[k] for k in rows] if placed is not vms else c0[i:j],
                              strict=True):
                old = vm.alloc
                if old.get(r0) != a0 or len(old) != 1:
                    vm.alloc = old = {r0: a0}
                allocations[vm.id] = old
        else:
            for vm, k in zip(placed, rows, strict=True):
                alloc = {r: cols[c][k] if c >= 0 else 0.0 for r, c in columns}
                if alloc != vm.alloc:
                    vm.alloc = alloc
                allocations[vm.id] = vm.alloc
        i = j
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
    runs: Sequence[tuple[App, list[VMRecord]]], host: IntArray, before: IntArray,
    alloc: FloatArray, bid: FloatArray, prices: Mapping[str, float], start: int = 0,
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """Per application (id order): the bids of its VMs that have a host (micro-credits,
    rounded per VM) and what they use at ``prices`` (allocation x price over the resources it
    trades, rounded per VM, at most the VM's bid). ``runs`` are rows ``start`` on of the
    market's input (``bid``, hosts ``before``) and of the placement (``host``, ``alloc``), as
    :func:`make_plan` took them into the VM records: a VM the clearing did not place keeps
    the host it had (and is billed its bid, as it was VM by VM) and uses nothing.

    Vectorised over the VMs (numpy) with the arithmetic of the per-VM sums it replaces: a
    VM's bid holds its traded resources only, so its row sum is ``sum(vm.bid.values())``
    (two resources: addition commutes), and a VM's usage adds its traded columns' ``a * p``
    in trade order; ``np.rint`` rounds half to even as :func:`round` does."""
    counts = [len(vms) for _, vms in runs]
    n = sum(counts)
    if not n:
        return (), ()
    rows = slice(start, start + n)
    placed = host[rows] != NO_HOST
    hosted = placed | (before[rows] != NO_HOST)  # the VM records' hosts after make_plan
    x = np.rint(row_sum(bid[rows]) * MICRO).astype(np.int64)
    price = np.array([prices[r] for r in RESOURCES])
    a = alloc[rows]
    used = np.zeros(n)
    columns = [{k for _, k in _const(app).columns} for app, _ in runs]
    for k in range(len(RESOURCES)):  # column k, for the VMs whose applications trade it
        traded = [k in c for c in columns]
        if any(traded):
            term = a[:, k] * price[k]
            if not all(traded):
                term = np.where(np.repeat(traded, counts), term, 0.0)
            used = used + term
    u = np.where(placed, np.minimum(np.rint(used * MICRO).astype(np.int64), x), 0)
    starts = np.cumsum([0, *counts[:-1]])
    totals = np.add.reduceat(np.where(hosted, x, 0), starts).tolist()
    uses = np.add.reduceat(np.where(hosted, u, 0), starts).tolist()
    any_hosted = np.logical_or.reduceat(hosted, starts).tolist()
    bills: dict[str, int] = {}
    usage: dict[str, int] = {}
    for (app, _), p, t, v in zip(runs, any_hosted, totals, uses, strict=True):
        if p:
            i = app.spec.id
            bills[i] = bills.get(i, 0) + t
            usage[i] = usage.get(i, 0) + v
    names = sorted(bills)
    return tuple((i, bills[i]) for i in names), tuple((i, usage[i]) for i in names)


def _const(app: App) -> AppConst:
    """``app``'s constant parts, made by :func:`make_plan` (which always runs first)."""
    if app.const is None:
        raise ValueError(f"application {app.spec.id!r}: bills_of before make_plan")
    return app.const
