"""No ghost running (issue 26): a platform whose VM is gone for good ends as ``failed``.

The backend says which VMs cannot run any more (``backend.failed()``: the local backend's
processes gone whose restart failed or whose restarts are used up, VMs that could not be
created — missing ``files_in``, a command that cannot start, a cgroup that cannot be made —
and any VM whose state is ``failed``, such as one whose cgroup vanished). For each,
:func:`fail_dead` ends its platform through the driver (:meth:`Driver.stop
<merkat.runtime.driver.Driver.stop>` with ``failed``: the platform's end rule and the lifecycle
table's :func:`~merkat.core.lifecycle.app_failure`): its VMs destroyed, its status
``failed`` with the reason, a ``vm-failed`` event; the driver's end rule writes its end in
the store and sends its money home in one transaction (:mod:`merkat.service.money`).

Charging stops in the period the failure is seen: the manager looks before the period (after
the health check), so a platform failed there is not in the period's market; a VM that could
not be created is only known after the period's charge (the backend applies the plan after
it), so with charging by bid that period's charge is refunded (``refund: platform NAME
failed``, idempotency key ``failed-refund/NAME/PERIOD``): a VM that never ran is never billed.
With charging by use its open deposit is settled on what it used when the platform ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkat.control.types import AppStatus
from merkat.core.backend import Plan
from merkat.core.draft import writing
from merkat.core.lifecycle import app_failure
from merkat.service.backends import Failing, Listing

if TYPE_CHECKING:
    from merkat.service.context import ManagerState


def fail_dead(m: ManagerState, refund_period: int | None = None) -> list[str]:
    """End as failed every active platform with a VM the backend reports gone for good
    (module doc); ``refund_period``: the period whose charge the failed platforms get back
    (their VMs failed at its start: after it was charged). Returns the platforms failed.
    Call under the manager's lock."""
    dead = m.backend.failed() if isinstance(m.backend, Failing) else {}
    ended: list[str] = []
    stray: list[str] = []
    for vm, reason in sorted(dead.items()):
        name = vm.split("/", 1)[0]
        app = m.platform.apps.get(name)
        if app is None or not app.active:
            if name not in ended:
                stray.append(vm)  # a VM its platform no longer has: just forgotten
            continue
        if not isinstance(app_failure(app.status), AppStatus):
            continue
        # this period's charge back first: the end rule below sends it home with the rest
        refunded = _refund(m, name, refund_period) if refund_period is not None else 0
        # the platform's end rule, the lifecycle table's failure: its VMs (and this one)
        m.driver.stop(name, f"VM {vm} {reason}", failed=True, also=(vm,))
        m._event("vm-failed", f"{vm}: {reason}; platform {name} failed, no charge from this "
                 "period on" + (f" ({refunded / 1e6:g} refunded)" if refunded else ""), name)
        ended.append(name)
    stray = [vm for vm in stray if vm.split("/", 1)[0] not in ended]
    if stray:
        m.backend.apply(Plan(time=m.clock(), period=m.platform.period, destroy=tuple(stray)))
    return ended


def _refund(m: ManagerState, name: str, period: int) -> int:
    """Give platform ``name`` back what it paid by bid since the manager last counted
    (this period's charge, or this admission's); returns the micro-credits."""
    economy = m.driver.economy
    app = m.platform.apps[name]
    delta = app.spent - m.paid.get(name, 0)
    if delta <= 0 or economy.charging != "bid":
        return 0
    m.store.ledger.transfer(economy.provider, app.account, delta,
                            f"refund: platform {name} failed", period,
                            idempotency_key=f"failed-refund/{name}/{period}")
    app.spent -= delta
    return delta


def reconcile(m: ManagerState) -> list[str]:
    """After a failed period (or admission), make the platform's VM records and the backend
    agree again (no database: it may be what failed). A period that failed between its
    decision and its end left the decision's changes in memory without their effects: VMs
    placed but never created (or resumed), VMs released or suspended but still running. Here:

    - a VM placed in that decision (``booting`` or ``resuming`` on a host) that the backend
      does not run is placed again by the next period; one it runs is ``running``;
    - a VM the backend runs that no active platform holds is destroyed; one its platform
      holds as ``suspended`` is suspended.

    Returns what was done, one line each (the loop logs them). Call under the lock."""
    from merkat.control.types import VMState
    from merkat.market import NO_HOST

    backend = m.backend
    done: list[str] = []
    held: dict[str, VMState] = {}
    for app in m.platform.active.values():
        with writing(app) as vms:  # (the records written: the columns read again)
            for vm in vms:
                held[vm.id] = vm.state
                if vm.state not in (VMState.BOOTING, VMState.RESUMING) \
                        or vm.host == NO_HOST or vm.new:
                    continue
                d = backend.describe(vm.id)
                if d is None or (vm.state is VMState.RESUMING
                                 and d.get("process") == "suspended"):
                    vm.host, vm.new, vm.alloc = NO_HOST, True, {}
                    done.append(f"{vm.id}: placed again (its start was lost)")
                else:
                    vm.state = VMState.RUNNING
                    done.append(f"{vm.id}: running")
    if not isinstance(backend, Listing):
        return done
    destroy = tuple(v for v in backend.vm_ids() if v not in held)
    suspend = tuple(sorted(v for v, s in held.items() if s is VMState.SUSPENDED
                           and (backend.describe(v) or {}).get("process") == "running"))
    if destroy or suspend:
        backend.apply(Plan(time=m.clock(), period=m.platform.period, destroy=destroy,
                           suspend=suspend))
        done += [f"{v}: destroyed (its platform released it)" for v in destroy]
        done += [f"{v}: suspended" for v in suspend]
    return done
