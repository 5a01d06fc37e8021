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

from collections.abc import Callable, Sequence

from merkat.control.base import Controller
from merkat.control.deadline import VerticalDeadline
from merkat.control.types import Action, AppStatus, Demand, Observation, VMState
from merkat.core.draft import draft, kept
from merkat.core.lifecycle import app_failure
from merkat.core.model import App, AppNext, NonFiniteBid, Observed, Ops
from merkat.core.reconcile import Decider, Prices, end

REASON_MAX = 200


def ask(controller: Controller, obs: Observation) -> Demand | str:
    """``controller``'s demand for ``obs``, or the reason of the exception it raised."""
    try:
        return controller.decide(obs)
    except Exception as e:  # any error of user code is that application's alone
        return reason_of(e)


WAIT = Demand(Action.NONE, reason="suspended")
"""The demand :func:`resting` stands for: no life-cycle change and no bid (a waiting or
suspended application stays so; the period keeps only its action)."""


def resting(decider: Decider, app: App, now: float, seen: Observed, prices: Prices,
            history: Sequence[Prices]) -> bool:
    """Whether ``app`` (not running) is suspended and its controller certainly answers
    :data:`WAIT` this period without changing its state, found without an
    :class:`~merkat.control.types.Observation` (a controller of a type in :data:`_RESTING`,
    its ``still_suspended`` on the values the observation would hold); False otherwise, and
    when the check raises: the caller then asks the controller (:func:`ask`).

    What it replaces: :meth:`Decider.observe <merkat.core.reconcile.Decider.observe>` and
    :func:`ask` for the suspended applications of a themis-fig5 run, most periods of most of
    them (61 k of 62 k scalar decisions of its 0.2 run). ``tests/test_resting.py`` pins
    ``still_suspended`` against ``decide``; the golden digests and ``tests/test_batched.py``
    (``Platform.batched=False`` asks every controller) the runs."""
    check = _RESTING.get(type(app.controller))
    if check is None or app.status is not AppStatus.SUSPENDED:
        return False
    states = kept(app)[1]
    if not states or states.count(VMState.SUSPENDED) != len(states):  # (Observation.phase)
        return False
    const = app.const or decider.const(app)
    spec = app.spec
    try:
        return bool(check(app.controller, now, decider.period, spec.deadline, seen.metrics,
                          decider.prices_for(spec.trade, prices, history), const.vm_size))
    except Exception:  # (the controller's own path reports it)
        return False


_RESTING: dict[type, Callable[..., bool]] = {VerticalDeadline: VerticalDeadline.still_suspended}
"""The controller types whose suspended state :func:`resting` decides, by exact type (a
subclass may change what it answers), with their check."""


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
