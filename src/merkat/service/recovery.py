"""Crash and restart: what the manager keeps of its VMs, and how a restarted server takes them
back (docs/service.md, "Crash and restart").

After every period (and admission between periods) :func:`save_vms` writes each active
platform's VMs to the store (id, index, node, state, bid, allocation) when they changed. A
server killed with SIGKILL leaves its VMs running: on the local backend they live in their own
sessions and cgroups, on the Kubernetes backend they are pods. At start-up :func:`recover`
admits the active platforms again (new controllers, the money their accounts hold, their
deadlines from submission) and, on a backend that can (``adopt(vm, app, host, index, alloc)``,
``alloc`` None for a VM of a suspended platform: the local and Kubernetes backends), takes
each stored VM back — the local backend through its cgroup (the same process, on its node,
frozen if its platform was suspended, its allocation written again), the Kubernetes backend
through its pod found by label (the same pod on its node, resized only if its spec differs;
a suspended VM has no pod) — or starts it again when it is gone (an empty cgroup; a pod
deleted, ended or on a node gone); the platform resumes in its stored state and the period
counter continues. A backend whose report names the VM's ``node`` (the pod's) moves the record
there. The cgroups or pods no active platform claims are destroyed (``reap_orphans``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from merkat.control.types import AppStatus, VMState
from merkat.core.backend import Plan, VMPlacement
from merkat.core.model import VMRecord
from merkat.core.period import Platform
from merkat.market import NO_HOST
from merkat.service.backends import Adopting, LiveBackend
from merkat.service.db import PlatformRow, Store, VmRow, vm_number
from merkat.service.templates import TemplateError

ACTIVE = ("waiting", "running", "suspended")


class Kept(Protocol):
    """What recovery reads and writes of the applications manager (not the manager itself):
    the store, the platform, the backend, the wall clock, each VM's index in its platform,
    the VMs last written to the store, and the admitted platforms' store states
    (``live[name].state``)."""

    store: Store
    platform: Platform
    backend: LiveBackend
    clock: Callable[[], float]
    vm_index: dict[str, int]
    saved_vms: dict[str, tuple[VmRow, ...]]

    @property
    def live(self) -> Mapping[str, Any]: ...

    def end_failed(self, name: str, owner: str, values: Mapping[str, Any]) -> None:
        """End platform ``name`` as failed with ``values`` and give its money back to
        ``owner``, in one transaction (the driver's end rule:
        :meth:`merkat.service.money.StoreEnds.end_stored`)."""
        ...


def save_vms(m: Kept) -> None:
    """Write the VMs of the platforms whose VMs changed since the last write (one
    transaction; an ended platform's VMs are forgotten)."""
    ids = m.platform.hosts.ids
    changed: dict[str, tuple[VmRow, ...]] = {}
    for name in {*m.saved_vms, *m.live}:
        app = m.platform.apps.get(name)
        rows: tuple[VmRow, ...] = () if app is None or not app.active else tuple(
            VmRow(vm.id, name, m.vm_index.get(vm.id, 0),
                  ids[vm.host] if vm.host != NO_HOST else None, vm.state.value,
                  dict(vm.bid), dict(vm.alloc)) for vm in app.records())
        if rows != m.saved_vms.get(name, ()):
            changed[name] = rows
    if not changed:
        return
    m.store.save_vms(changed)
    for name, rows in changed.items():
        if rows:
            m.saved_vms[name] = rows
        else:
            m.saved_vms.pop(name, None)
            for vm in [v for v in m.vm_index if v.startswith(name + "/")]:
                del m.vm_index[vm]


def paid_before(ledger: Any, account: str, provider: str) -> int:
    """What ``account`` has paid the provider so far, net of refunds (micro-credits), from
    it or from its deposit (``ACCOUNT:hold``: charging by use pays from there): a platform
    admitted again after a restart goes on counting from there, and one that ended before
    it shows what it paid (:meth:`merkat.service.manager.Manager.spent`)."""
    from merkat.bank.policies import hold_account

    paid = 0
    for a in (account, hold_account(account)):
        if not ledger.has_account(a):
            continue
        for t in ledger.history(a):
            if t.payer == a and t.payee == provider:
                paid += t.amount
            elif t.payer == provider and t.payee == a:
                paid -= t.amount
    return paid


def recover(m: Kept, readmit: Callable[[PlatformRow], None]) -> None:
    """Admit again the platforms the previous server left active, re-adopt their VMs, and
    destroy the cgroups or pods no platform claims (module doc). A platform that cannot be admitted
    again ends as ``failed`` and its account's balance goes back to its owner (idempotent).
    Platforms still queued stay queued. ``readmit(row)`` admits ``row`` again (its account,
    money and deadline kept: :func:`merkat.service.admit.admit_row`)."""
    ledger = m.store.ledger
    for row in m.store.platforms(states=ACTIVE):
        account = row.account or f"app:{row.name}"
        try:
            readmit(row)
        except (TemplateError, ValueError) as exc:
            left = ledger.balance(account) if ledger.has_account(account) else 0
            m.store.save_vms({row.name: ()})
            reason = (f"server restarted while {row.state} and the platform could not "
                      f"be admitted again ({exc}); {left / 1e6:g} credits refunded")
            # its end and its money's return in one transaction: a second restart finds it
            # ended (and its account empty), so nothing is refunded twice
            m.end_failed(row.name, row.owner, {"state": "failed", "ended": m.clock(),
                                               "outcome": reason})
            m.store.add_event("state", f"platform {row.name}: failed ({reason})", row.name,
                              row.owner)
            continue
        how = readopt(m, row)
        m.store.add_event("recovery", f"platform {row.name} resumed after a server "
                          f"restart (it was {row.state}): {how}", row.name, row.owner)
    backend = m.backend
    if not isinstance(backend, Adopting):
        return
    orphans = backend.reap_orphans()
    if orphans:
        m.store.add_event("recovery", f"destroyed {len(orphans)} VM(s) no platform claims: "
                          f"{', '.join(orphans[:10])}")
    foreign = backend.foreign
    if foreign:  # another server's VMs under our prefix: never ours to destroy
        m.store.add_event("recovery", f"left {len(foreign)} VM group(s) of another server "
                          f"alone: {', '.join(foreign[:10])}")


def readopt(m: Kept, row: PlatformRow) -> str:
    """Give the re-admitted platform ``row`` its stored VMs back (module doc); returns what
    happened, in words. Without stored VMs or a backend that adopts, the platform waits and
    its controller starts it again (its VMs are started anew)."""
    app = m.platform.apps[row.name]
    stored = m.store.vms(row.name)
    backend = m.backend
    if not isinstance(backend, Adopting) or not stored or row.state == "waiting":
        return "its VMs are started again"
    hosts = {h: k for k, h in enumerate(m.platform.hosts.ids)}
    suspended = row.state == "suspended"
    counts: Counter[str] = Counter()
    records: list[VMRecord] = []
    freeze: list[str] = []
    thaw: list[VMPlacement] = []
    for v in stored:
        state = VMState(v.state)
        host = hosts.get(v.node, NO_HOST) if v.node is not None else NO_HOST
        m.vm_index[v.id] = v.index
        rec = VMRecord(v.id, app.spec.id, state, host=host, bid=dict(v.bid),
                       alloc=dict(v.alloc) if host != NO_HOST else {}, new=host == NO_HOST)
        records.append(rec)
        if state is VMState.BOOTING and host == NO_HOST:
            continue  # never started: the next period places it
        frozen = suspended or state in (VMState.SUSPENDED, VMState.RESUMING)
        r = backend.adopt(v.id, app.spec.id, max(host, 0), v.index, None if frozen else v.alloc)
        counts[r.op] += 1
        if r.op == "adopt-exited":  # finished while the server was down: not started again
            continue
        if r.error:
            m.store.add_event("vm-error", f"{v.id}: {r.op} failed: {r.error}", row.name,
                              row.owner)
            if m.backend.describe(v.id) is None:  # not running anywhere: placed again
                rec.state, rec.host, rec.new, rec.alloc = VMState.BOOTING, NO_HOST, True, {}
                continue
        where = r.node  # a backend that says where the VM is (kubernetes)
        if where in hosts and not frozen:
            rec.host, rec.new, rec.alloc = hosts[where], False, rec.alloc or dict(v.alloc)
        if state is VMState.MIGRATING:  # the move was written (cpuset) or not: it runs
            rec.state = VMState.RUNNING
        if frozen and r.op != "adopt-frozen":
            freeze.append(v.id)
        elif not frozen and r.op == "adopt-frozen":
            thaw.append(VMPlacement(v.id, app.spec.id, max(host, 0)))
    if freeze or thaw:
        m.backend.apply(Plan(time=m.clock(), period=m.platform.period, suspend=tuple(freeze),
                             resume=tuple(thaw)))
    app.vms = records  # (new records: their values become the columns)
    app.vm_count = max([vm_number(v.id) for v in stored] + [len(stored)])
    app.status = AppStatus(row.state)
    app.start_time = row.started
    if row.name in m.platform.queue:
        m.platform.queue.remove(row.name)
    m.store.set_platform(row.name, state=row.state)
    m.live[row.name].state = row.state
    m.saved_vms[row.name] = tuple(stored)
    adopted = counts["adopt"] + counts["adopt-frozen"]
    exited = (f", {counts['adopt-exited']} finished while the server was down (exit 0, not "
              "started again)") if counts["adopt-exited"] else ""
    return (f"{adopted} VM(s) re-adopted ({counts['adopt-frozen']} frozen), "
            f"{counts['restart']} started again{exited}")
