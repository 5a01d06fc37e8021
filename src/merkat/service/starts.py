"""A VM that did not start is retried and not billed (docs/service.md, "Failed operations").

The backend's :class:`~merkat.core.backend.ApplyReport` says which operations of a plan
failed; the platform (:meth:`Platform.settle <merkat.core.period.Platform.settle>`) places
a VM whose create or resume failed again in the next period, moves a VM whose migration failed
back to its host and re-issues a failed destroy or suspend. The period charged before the
backend acted (nothing runs for free), so with charging by bid :func:`refund_failed_starts`
gives each platform back what its VMs that did not start paid for this period (or for this
admission between periods, prorated as it was charged): one ledger transfer per platform
(``refund: platform NAME: VM did not start``, idempotency key
``failed-start/NAME/PERIOD/TIME``) and one ``refund`` event. With charging by use the VM's
deposit is settled on what it measured (nothing), so nothing is refunded here. A VM the
backend reports gone for good (``failed()``) is the platform's failure instead
(:mod:`merkat.service.failures`, which refunds the whole period).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from merkat.core.backend import ApplyReport
from merkat.defaults import MICRO
from merkat.runtime.driver import Driver
from merkat.service.backends import Failing

STARTS = ("create", "resume")


def refund_failed_starts(driver: Driver, report: ApplyReport | None, period: int,
                         paid: Mapping[str, int], event: Callable[[str, str, str], None],
                         fraction: float = 1.0) -> int:
    """Refund what the VMs of ``report`` that did not start paid in ``period`` (module doc);
    ``paid``: what each platform had paid when its ``charge`` event was last written (so
    ``spent - paid`` is this period's charge); ``event(kind, message, platform)``;
    ``fraction``: the part of the period the charge covered. Returns the micro-credits
    refunded. Call under the manager's lock, before its ``charge`` events."""
    economy, platform, backend = driver.economy, driver.platform, driver.backend
    if report is None or economy.charging != "bid":
        return 0
    gone = backend.failed() if isinstance(backend, Failing) else {}
    owed: dict[str, list[int]] = {}
    for op in report.failed:
        if op.op not in STARTS or op.vm in gone:
            continue
        name = op.vm.split("/", 1)[0]
        app = platform.apps.get(name)
        if app is None or not app.active:
            continue
        for vm in app.records():
            if vm.id == op.vm:  # its bill: its bid for the period, as the charge rounded it
                owed.setdefault(name, []).append(
                    round(round(sum(vm.bid.values()) * MICRO) * fraction))
    total = 0
    for name, bills in sorted(owed.items()):
        app = platform.apps[name]
        amount = min(sum(bills), app.spent - paid.get(name, 0))  # never more than it paid
        if amount <= 0:
            continue
        economy.ledger.transfer(economy.provider, app.account, amount,
                                f"refund: platform {name}: {len(bills)} VM(s) did not start",
                                period, idempotency_key=f"failed-start/{name}/{period}/"
                                f"{report.time:.6f}")
        app.spent -= amount
        total += amount
        event("refund", f"platform {name}: {len(bills)} VM(s) did not start; "
                 f"{amount / MICRO:g} refunded, started again in the next period", name)
    return total
