"""Application and VM lifecycles as data: one table of allowed transitions each, checked here.

An application is in one :class:`~merkat.control.types.AppStatus` (the controller's ``Phase``
and the platform's status are the same enum): ``waiting`` → ``running`` ⇄ ``suspended`` → an
end (``finished`` when its work is done, ``stopped`` otherwise, ``failed`` when the world
could not run it: :data:`APP_FAILURES`, the live service's VMs whose processes are gone for
good). A controller's
:class:`~merkat.control.types.Action` moves it along :data:`APP_TRANSITIONS`; an action the
table does not allow in the current status (``start`` while running, ``resume`` while running,
anything once ended) is **refused**: :func:`app_transition` returns the reason, the platform
records it in the period's record and treats the action as ``none`` — it is never silently
re-applied.

A VM's :class:`~merkat.control.types.VMState` moves along :data:`VM_TRANSITIONS`; the platform
changes a VM's state only through :func:`vm_transition`, with the backend's report deciding
whether a requested operation happened (a failed boot stays ``booting`` and is retried).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from merkat.control.types import Action, AppStatus, VMState

ENDED = frozenset({AppStatus.FINISHED, AppStatus.STOPPED, AppStatus.FAILED})

APP_TRANSITIONS: Mapping[tuple[AppStatus, Action], AppStatus] = MappingProxyType({
    (AppStatus.WAITING, Action.NONE): AppStatus.WAITING,
    (AppStatus.WAITING, Action.START): AppStatus.RUNNING,
    (AppStatus.WAITING, Action.STOP): AppStatus.STOPPED,
    (AppStatus.RUNNING, Action.NONE): AppStatus.RUNNING,
    (AppStatus.RUNNING, Action.SUSPEND): AppStatus.SUSPENDED,
    (AppStatus.RUNNING, Action.STOP): AppStatus.STOPPED,
    (AppStatus.SUSPENDED, Action.NONE): AppStatus.SUSPENDED,
    (AppStatus.SUSPENDED, Action.RESUME): AppStatus.RUNNING,
    (AppStatus.SUSPENDED, Action.STOP): AppStatus.STOPPED,
})
"""``(status, action) -> next status`` for every allowed pair. ``stop`` leads to ``stopped``;
the platform turns it into ``finished`` when the backend reports the work done."""

APP_FAILURES: Mapping[AppStatus, AppStatus] = MappingProxyType({
    AppStatus.WAITING: AppStatus.FAILED,
    AppStatus.RUNNING: AppStatus.FAILED,
    AppStatus.SUSPENDED: AppStatus.FAILED,
})
"""``status -> next status`` when the backend reports that the application's VMs cannot run
(not a controller's action: a process gone whose restart failed or whose restarts are used
up, a VM that could not be created). An ended application does not fail."""

VM_TRANSITIONS: frozenset[tuple[VMState, VMState]] = frozenset({
    (VMState.BOOTING, VMState.RUNNING),
    (VMState.RUNNING, VMState.MIGRATING),
    (VMState.MIGRATING, VMState.RUNNING),
    (VMState.RUNNING, VMState.SUSPENDED),
    (VMState.BOOTING, VMState.SUSPENDED),
    (VMState.RESUMING, VMState.SUSPENDED),
    (VMState.SUSPENDED, VMState.RESUMING),
    (VMState.RESUMING, VMState.RUNNING),
})
"""Allowed ``(from, to)`` VM state changes (a VM leaves the platform by being destroyed, from
any state)."""


class TransitionRefused(ValueError):
    """A VM state change the table does not allow (a bug in the caller, never a user error)."""


def app_transition(status: AppStatus, action: Action) -> AppStatus | str:
    """The status ``action`` leads to from ``status``, or the reason it is refused."""
    nxt = APP_TRANSITIONS.get((status, action))
    if nxt is None:
        return f"{action.value} refused while {status.value}"
    return nxt


def app_failure(status: AppStatus) -> AppStatus | str:
    """The status a failure of the world leads to from ``status`` (:data:`APP_FAILURES`),
    or the reason it does not apply (the application has ended)."""
    nxt = APP_FAILURES.get(status)
    if nxt is None:
        return f"failure ignored while {status.value}"
    return nxt


def vm_transition(state: VMState, to: VMState) -> VMState:
    """``to`` if the table allows ``state -> to`` (or ``state`` is ``to``); raises otherwise."""
    if state is to or (state, to) in VM_TRANSITIONS:
        return to
    raise TransitionRefused(f"VM transition {state.value} -> {to.value} is not allowed")
