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
driver returns the failed one's money by the usual end path. A bid that is not a finite
number (:class:`~merkat.core.model.NonFiniteBid`) is not a controller call and still
raises.
"""

from __future__ import annotations

from merkat.control.base import Controller
from merkat.control.types import AppStatus, Demand, Observation
from merkat.core.lifecycle import app_failure
from merkat.core.model import AppNext, Ops
from merkat.core.reconcile import end

REASON_MAX = 200


def ask(controller: Controller, obs: Observation) -> Demand | str:
    """``controller``'s demand for ``obs``, or the reason of the exception it raised."""
    try:
        return controller.decide(obs)
    except Exception as e:  # any error of user code is that application's alone
        first = (str(e).splitlines() or [""])[0]
        return f"controller error: {type(e).__name__}: {first}"[:REASON_MAX]


def fail(nx: AppNext, now: float, reason: str, ops: Ops) -> None:
    """End ``nx`` (an active application's next state) as failed for ``reason``: its VMs go
    to ``ops.destroy``; the status is the lifecycle table's failure transition."""
    nxt = app_failure(nx.status)
    end(nx, now, reason, False, ops, "failed")
    nx.status = nxt if isinstance(nxt, AppStatus) else AppStatus.FAILED
