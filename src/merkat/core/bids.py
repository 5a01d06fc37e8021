"""A period's bids (:mod:`merkat.core.reconcile`): a demand's bids into an application's
next state (:class:`~merkat.core.model.AppNext`), one shared mapping per distinct bid, and
kept within the application's balance.

Pure: it changes the next state it is given, never a record."""

from __future__ import annotations

import math
from collections.abc import Mapping

from merkat.control.types import Demand
from merkat.core.draft import own_bids
from merkat.core.model import AppNext, NonFiniteBid, to_micro
from merkat.defaults import MICRO


def set_bids(nx: AppNext, trade: tuple[str, ...], demand: Demand) -> None:
    """``demand``'s bid of each VM of ``nx`` (the resources it ``trade``s only): VMs that bid
    alike share one mapping (the market's rows, the charge and the controllers' sums go by
    shared mappings); the first VM's mapping is kept when it is equal (its controller view
    stays valid)."""
    src: Mapping[str, float] | None = None
    bid: dict[str, float] = {}
    fresh = False  # ``bid`` is new and no VM holds it yet
    bids, new_bid = demand.bids, demand.new_vm_bid
    ids = nx.ids
    values = list(bids.values())
    if ids and values.count(new_bid) == len(values):
        # every VM bids alike (Controller.uniform): what the loop below does, in one step
        b = bids.get(ids[0], new_bid)
        set_uniform(nx, {r: float(b.get(r, 0.0)) for r in trade})
        return
    cur = nx.bids
    shared = nx.base[2]  # (the record's list until a bid differs: copy on write)
    for k, vm_id in enumerate(ids):
        b = bids.get(vm_id, new_bid)  # Demand.bid_for, inlined
        if b is not src and (src is None or b != src):
            bid = {r: float(b.get(r, 0.0)) for r in trade}
            fresh = True
        src = b
        old = cur[k]
        if old is not bid:
            if fresh and old == bid:
                bid = old
            else:
                if cur is shared:
                    cur = own_bids(nx)
                cur[k] = bid
        fresh = False


def set_uniform(nx: AppNext, bid: dict[str, float]) -> None:
    """Every VM of ``nx`` bids ``bid`` (over the resources it trades), one shared mapping:
    the first VM's own when it is equal."""
    cur = nx.bids
    if cur and cur[0] == bid:
        bid = cur[0]
    nx.bids = [bid] * len(nx.ids)


def within_budget(nx: AppNext, balance: int, reserve: Mapping[str, float], policy: str) -> None:
    """Scale ``nx``'s bids down to what its balance pays, never under the reserve.

    A controller should never bid beyond its balance (bid_max is part of its observation);
    if one does, its bids are scaled down in proportion. An application that cannot even pay
    the reserve price for its VMs bids the reserve and is charged what it has (the charge
    policy then leaves its VMs unpaid, which the next period's balance shows). ``policy``
    names the controller in the error a bid that is not a finite number raises.
    """
    total: float = 0.0
    last: dict[str, float] | None = None
    x: float = 0.0
    bids = nx.bids
    for b in bids:
        if b is not last:
            last = b
            x = sum(last.values())
        total += x
    if not math.isfinite(total):  # NaN or infinity: a bug of the policy, named here
        bad = next(i for i, b in enumerate(bids) if not math.isfinite(sum(b.values())))
        raise NonFiniteBid(
            f"policy {policy!r} bid {dict(bids[bad])} for VM {nx.ids[bad]!r} of "
            f"application {nx.id!r}: not a finite number "
            "(a bug in the policy)"
        )
    if total <= 0 or to_micro(total) <= balance:
        return
    k = balance / MICRO / total
    last = None
    scaled: dict[str, float] = {}
    out = []
    for b in bids:  # VMs that shared a bid share its scaled one
        if b is not last:
            last = b
            scaled = {r: max(v * k, reserve.get(r, 0.0)) for r, v in last.items()}
        out.append(scaled)
    nx.bids = out
