"""Billed at the allocation actually applied (issue 30; docs/kubernetes.md, "Resizes the cluster
may refuse").

A backend whose allocations can be refused after the plan (Kubernetes: a resize ``Deferred``,
``Infeasible`` or still in progress) says so through ``backend.unapplied()``: ``{vm: {"state",
"message", "short": {resource: (requested, applied)}, "current"}}``, read by the period that
just ran (its pod list), about the allocation the *previous* period asked for. After each period
:func:`settle_applied`:

1. **refunds** each such VM the part of the previous period's charge it did not get: for each
   resource short, ``charged × (requested − applied) / requested``, where ``charged`` is what
   that VM paid for the resource in that period — its bid for it with charging by ``bid``, its
   allocation × the price with charging by ``use`` — one ledger transfer from the provider
   (``refund: VM held ... (resize Deferred)``, idempotency key ``unapplied/VM/PERIOD``);
2. makes the VM's record show what it holds: its allocation becomes the applied one for the
   resources short (when the pod's spec still asks the same: no new resize was sent this
   period), so its controller observes the applied share at the next period, and ``platform
   show`` and ``merkat nodes`` say so;
3. writes one event ``resize-refused`` when a VM's refusal starts or changes (state, sizes),
   not every period (the ledger has every refund);
4. remembers what each running VM pays this period, for the next period's refund.

Before that, :func:`follow_moves` puts on its new node each VM the backend moved because its
resize stayed Deferred (operation ``move``, :mod:`merkat.backends.kubernetes.moves`), so the
market clears it there from the next period.

A backend without ``unapplied`` (the local backend: cgroups apply at once) is left alone.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from merkat.core.draft import writing
from merkat.defaults import MICRO
from merkat.market import NO_HOST
from merkat.service.backends import Refusing

if TYPE_CHECKING:
    from merkat.service.context import ManagerState


@dataclass
class _Billing:
    billed: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    told: dict[str, tuple[Any, ...]] = field(default_factory=dict)


_STATE: weakref.WeakKeyDictionary[Any, _Billing] = weakref.WeakKeyDictionary()


def settle_applied(m: ManagerState, period: int) -> int:
    """Steps 1-4 of the module doc after period ``period``; returns the micro-credits
    refunded. Call under the manager's lock, after the period's backend report."""
    if not isinstance(m.backend, Refusing):
        return 0
    follow_moves(m)
    state = _STATE.setdefault(m, _Billing())
    economy = m.driver.economy
    short: dict[str, dict[str, Any]] = m.backend.unapplied()
    total = 0
    bills = _bills(m, economy.charging)  # this period's, before any record changes below
    for vm_id, s in sorted(short.items()):
        name = vm_id.split("/", 1)[0]
        app = m.platform.apps.get(name)
        if app is None or not app.active:
            continue
        refund, before = 0, state.billed.get(vm_id)
        if before is not None and before[0] < period:
            for r, (req, got) in s["short"].items():
                if req > 0:
                    refund += round(before[1].get(r, 0) * (req - got) / req)
            refund = min(refund, sum(before[1].values()))
        if refund > 0:
            m.store.ledger.transfer(
                economy.provider, app.account, refund,
                f"refund: {vm_id} held {_sizes(s['short'], 1)} of the {_sizes(s['short'], 0)} "
                f"billed (resize {s['state']})", period,
                idempotency_key=f"unapplied/{vm_id}/{before[0] if before else period}")
            app.spent -= refund
            total += refund
        if s.get("current", True):
            with writing(app) as vms:  # (the columns read again)
                for vm in vms:
                    if vm.id == vm_id:
                        vm.alloc = {**vm.alloc, **{r: got for r, (_, got) in s["short"].items()}}
        key = (s["state"], tuple(sorted(s["short"].items())))
        if state.told.get(vm_id) != key:
            state.told[vm_id] = key
            why = f" ({s['message']})" if s.get("message") else ""
            m._event("resize-refused", f"{vm_id}: resize to {_sizes(s['short'], 0)} "
                     f"{s['state']}{why}; it holds {_sizes(s['short'], 1)} and is billed for "
                     "that" + (f" ({refund / MICRO:g} refunded)" if refund else ""), name)
    for vm_id in [v for v in state.told if v not in short]:
        del state.told[vm_id]
    state.billed = {vm: (period, b) for vm, b in bills.items()}
    return total


def _bills(m: ManagerState, charging: str) -> dict[str, dict[str, int]]:
    """What each placed VM pays for each resource this period (micro-credits)."""
    out: dict[str, dict[str, int]] = {}
    prices = m.platform.prices
    for app in m.platform.active.values():
        for vm in app.records():
            if vm.host == NO_HOST:
                continue
            if charging == "bid":
                out[vm.id] = {r: round(b * MICRO) for r, b in vm.bid.items()}
            else:
                out[vm.id] = {r: round(a * prices.get(r, 0.0) * MICRO)
                              for r, a in vm.alloc.items()}
    return out


def _sizes(short: dict[str, tuple[float, float]], k: int) -> str:
    units = {"cpu": "cores", "memory": "MiB"}
    return ", ".join(f"{v[k]:g} {units.get(r, r)}" for r, v in sorted(short.items()))


def follow_moves(m: ManagerState) -> None:
    """The VMs the backend moved this period (``move`` operations, their new ``node``) get
    that node as their host in the platform's records."""
    ids = list(m.platform.hosts.ids)
    report = m.driver.report
    for r in report.ops if report is not None else ():
        if r.op != "move" or not r.ok or r.node not in ids:
            continue
        app = m.platform.apps.get(r.vm.split("/", 1)[0])
        if app is None:
            continue
        with writing(app) as vms:  # (the columns read again)
            for vm in vms:
                if vm.id == r.vm and vm.host != NO_HOST:
                    vm.host = ids.index(r.node)
