"""A period's bids (:mod:`merkat.platform.period`, reconciliation): a demand's bids into the
VM records, one shared mapping per distinct bid, and kept within the application's balance.

Pure: it updates the VM records of the application it is given."""

from __future__ import annotations

import math
from collections.abc import Mapping

from merkat.control.types import Demand
from merkat.platform.model import MICRO, App, NonFiniteBid, to_micro


def set_bids(app: App, demand: Demand) -> None:
    """``demand``'s bid of each VM of ``app`` (the resources it trades only): VMs that bid
    alike share one mapping (the market's rows, the charge and the controllers' sums go by
    shared mappings); the first VM's mapping is kept when it is equal (its controller view
    stays valid)."""
    trade = app.spec.trade  # a VM's bid holds the traded resources only
    src: Mapping[str, float] | None = None
    bid: dict[str, float] = {}
    fresh = False  # ``bid`` is new and no VM holds it yet
    bids, new_bid = demand.bids, demand.new_vm_bid
    vms = app.vms
    values = list(bids.values())
    if vms and values.count(new_bid) == len(values):
        # every VM bids alike (Controller.uniform): what the loop below does, in one step
        b = bids.get(vms[0].id, new_bid)
        bid = {r: float(b.get(r, 0.0)) for r in trade}
        if vms[0].bid == bid:
            bid = vms[0].bid
        for vm in vms:
            vm.bid = bid
        vms = []
    for vm in vms:
        b = bids.get(vm.id, new_bid)  # Demand.bid_for, inlined
        if b is not src and (src is None or b != src):
            bid = {r: float(b.get(r, 0.0)) for r in trade}
            fresh = True
        src = b
        if vm.bid is not bid:
            if fresh and vm.bid == bid:
                bid = vm.bid
            else:
                vm.bid = bid
        fresh = False


def within_budget(app: App, balance: int, reserve: Mapping[str, float]) -> None:
    """Scale the app's bids down to what its balance pays, never under the reserve.

    A controller should never bid beyond its balance (bid_max is part of its observation);
    if one does, its bids are scaled down in proportion. An application that cannot even pay
    the reserve price for its VMs bids the reserve and is charged what it has (the charge
    policy then leaves its VMs unpaid, which the next period's balance shows).
    """
    total: float = 0.0
    last: dict[str, float] | None = None
    x: float = 0.0
    for vm in app.vms:
        if vm.bid is not last:
            last = vm.bid
            x = sum(last.values())
        total += x
    if not math.isfinite(total):  # NaN or infinity: a bug of the policy, named here
        bad = next(vm for vm in app.vms if not math.isfinite(sum(vm.bid.values())))
        raise NonFiniteBid(
            f"policy {app.controller.name!r} bid {dict(bad.bid)} for VM {bad.id!r} of "
            f"application {app.spec.id!r}: not a finite number "
            "(a bug in the policy)"
        )
    if total <= 0 or to_micro(total) <= balance:
        return
    k = balance / MICRO / total
    last = None
    scaled: dict[str, float] = {}
    for vm in app.vms:  # VMs that shared a bid share its scaled one
        if vm.bid is not last:
            last = vm.bid
            scaled = {r: max(b * k, reserve.get(r, 0.0)) for r, b in last.items()}
        vm.bid = scaled
