"""The market's input from the platform's VMs (pure functions of the records): which VMs bid
this period, one row per VM, and whether two inputs are the same (the clearing cache)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from merkat.control.types import AppStatus, VMState
from merkat.market import RESOURCES, VMs
from merkat.platform.model import App, AppConst, VMRecord


def bidding(active: Iterable[App]) -> list[tuple[App, list[VMRecord]]]:
    """The VMs that bid this period, in runs of one application each (in the order of
    ``active``): a waiting app has no VM, a suspended one only suspended VMs."""
    runs = []
    suspended = VMState.SUSPENDED
    for a in active:
        if a.status is AppStatus.RUNNING:
            vms = a.vms
            for vm in vms:
                if vm.state is suspended:
                    vms = [v for v in vms if v.state is not suspended]
                    break
            if vms:
                runs.append((a, vms))
    return runs

def market_vms(runs: Sequence[tuple[App, list[VMRecord]]], n: int,
           const_of: Callable[[App], AppConst]) -> VMs:
    """The market's input: one row per bidding VM, application by application. VMs that
    share one bid mapping (the usual case) share its row."""
    n_res = len(RESOURCES)
    ids: list[str] = []
    hosts: list[int] = []
    bids: list[float] = []
    caps: list[list[float]] = []  # one row per application
    mins: list[list[float]] = []
    counts: list[int] = []
    for app, vms in runs:
        ids += [vm.id for vm in vms]
        hosts += [vm.host for vm in vms]
        first = vms[0].bid
        row = [first.get(r, 0.0) for r in RESOURCES]
        shared = True
        for vm in vms:
            if vm.bid is not first:
                shared = False
                break
        if shared:
            bids += row * len(vms)
        else:
            last_bid = first
            for vm in vms:
                if vm.bid is not last_bid:
                    last_bid = vm.bid
                    row = [last_bid.get(r, 0.0) for r in RESOURCES]
                bids += row
        const = app.const or const_of(app)
        caps.append(const.cap_row)
        mins.append(const.min_row)
        counts.append(len(vms))
    shape = (n, n_res)
    return VMs(
        ids=tuple(ids),
        bid=np.array(bids, dtype=np.float64).reshape(shape),
        cap=np.repeat(np.array(caps, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
        host=np.array(hosts, dtype=np.int64),
        minimum=np.repeat(np.array(mins, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
    )


def same_input(a: VMs, b: VMs) -> bool:
    """Whether two market inputs are the same arrays (VM ids only name VMs in errors)."""
    return (
        len(a) == len(b)
        and np.array_equal(a.host, b.host)
        and np.array_equal(a.bid, b.bid)
        and np.array_equal(a.cap, b.cap)
        and np.array_equal(a.minimum, b.minimum)
    )


