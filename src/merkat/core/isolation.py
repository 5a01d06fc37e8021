"""One application's controller error fails that application only, never the decision.

A controller is user code (a policy from an entry point, a NaN metric pushed by a user, a
division by zero on a strange observation): whatever it raises while deciding
(:meth:`~merkat.control.base.Controller.decide`, and so ``on_start``, ``on_monitor``,
``reconfigure``, ``on_resume``, ...) comes back as data. :func:`ask` returns the demand or
the error's reason (``controller error: <ExceptionType>: <message>``, at most
:data:`REASON_MAX` characters); :func:`fail` ends the application's next state through the
lifecycle table's failure transition (``failed``, outcome ``failed``) with its VMs released,
as a world that cannot run it does (:meth:`Platform.stop(failed=True)
<merkat.core.period.Platform.stop>`). The other applications' decisions go on; the
driver returns the failed one's money by the usual end path.

A demand whose bid is not a finite number (NaN, infinity: a
:class:`~merkat.core.model.NonFiniteBid` raised while the demand becomes the next state) is
the same kind of bug: :func:`reconcile` turns the demand into the next state, or fails the
application alone with ``controller error: NonFiniteBid: policy 'P' bid ... for VM ... of
application ...``, with whatever that demand had already added to the period's operations
and refusals taken back.
"""

from __future__ import annotations

from merkat.control.base import Controller
from merkat.control.types import Action, AppStatus, Demand, Observation
from merkat.core.draft import draft
from merkat.core.lifecycle import app_failure
from merkat.core.model import App, AppNext, NonFiniteBid, Observed, Ops
from merkat.core.reconcile import Decider, end

REASON_MAX = 200


def ask(controller: Controller, obs: Observation) -> Demand | str:
    """``controller``'s demand for ``obs``, or the reason of the exception it raised."""
    try:
        return controller.decide(obs)
    except Exception as e:  # any error of user code is that application's alone
        return reason_of(e)


WAIT = Demand(Action.NONE, reason="suspended")
"""The demand a resting application stands for (:meth:`merkat.core.batch.Pass.resting`): no
life-cycle change and no bid (a waiting or suspended application stays so; the period keeps
only its action)."""


def reason_of(e: Exception) -> str:
    """The failure reason of a controller's error ``e``: its type and first line, at most
    :data:`REASON_MAX` characters."""
    first = (str(e).splitlines() or [""])[0]
    return f"controller error: {type(e).__name__}: {first}"[:REASON_MAX]


def reconcile(decider: Decider, app: App, nx: AppNext, demand: Demand, now: float,
              balance: int, seen: Observed, ops: Ops, refused: list[str]) -> AppNext:
    """``decider.reconcile`` of ``app``'s ``demand`` into its next state ``nx``; returns it,
    or, when a bid of the demand is not a finite number, a new next state of ``app`` failed
    for that reason (its ``broke_since`` kept from ``nx``), ``ops`` and ``refused`` as they
    were before the demand."""
    marks = len(ops.destroy), len(ops.suspend), len(refused)
    try:
        decider.reconcile(app, nx, demand, now, balance, seen, ops, refused)
    except NonFiniteBid as e:
        del ops.destroy[marks[0]:], ops.suspend[marks[1]:], refused[marks[2]:]
        failed = draft(app)
        failed.broke_since = nx.broke_since
        fail(failed, now, reason_of(e), ops)
        return failed
    return nx


def fail(nx: AppNext, now: float, reason: str, ops: Ops) -> None:
    """End ``nx`` (an active application's next state) as failed for ``reason``: its VMs go
    to ``ops.destroy``; the status is the lifecycle table's failure transition."""
    nxt = app_failure(nx.status)
    end(nx, now, reason, False, ops, "failed")
    nx.status = nxt if isinstance(nxt, AppStatus) else AppStatus.FAILED
