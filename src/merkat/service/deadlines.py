"""Deadlines reported, not missed silently (issue 26): events for the platforms whose
controllers steer to a deadline.

Each period (:func:`report`, before the manager writes the states):

- ``deadline-at-risk``, when a platform's controller finds that its budget cannot buy the share
  its work needs by the deadline (:attr:`ShareSteer.at_risk <merkat.control.steer.ShareSteer>`),
  once each time it becomes so (``deadline back on track`` when it no longer is);
- at its end, ``deadline-met`` (finished by the deadline) or ``deadline-missed`` with the
  shortfall: the work done and left, and how long the measured rate needed for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkat.core.lifecycle import ENDED
from merkat.service.clusters import platform_metrics

if TYPE_CHECKING:
    from merkat.service.context import ManagerState


def report(m: ManagerState) -> None:
    """The deadline events of this period (module doc)."""
    for name, live in m.live.items():
        app = m.platform.apps.get(name)
        deadline = app.spec.deadline if app is not None else None
        if app is None or deadline is None:
            continue
        steer = getattr(app.controller, "share", None)
        if app.status in ENDED:
            _ended(m, name, platform_metrics(live), app.status.value, app.end_time, deadline,
                   app.reason)
            continue
        risk = steer.at_risk if steer is not None else None
        if (risk is None) != (live.at_risk is None):  # once each time it changes
            if risk is not None:
                m._event("deadline-at-risk", f"platform {name}: deadline at risk: {risk}", name)
            else:
                m._event("deadline-at-risk", f"platform {name}: deadline back on track", name)
        live.at_risk = risk


def _ended(m: ManagerState, name: str, metrics: object, state: str, end: float | None,
           deadline: float, reason: str) -> None:
    done = getattr(metrics, "work_done", 0.0)
    total = getattr(metrics, "work_total", None)
    rate = getattr(metrics, "progress_rate", None)
    end = end if end is not None else m.clock()
    if state == "finished" and end <= deadline + 1e-6:
        m._event("deadline-met", f"platform {name}: deadline met, {deadline - end:.1f} s "
                 "early", name)
        return
    if state == "finished":
        m._event("deadline-missed", f"platform {name}: deadline missed: finished "
                 f"{end - deadline:.1f} s late", name)
        return
    left = None if total is None else max(0.0, total - done)
    what = f"{done:g} of {total:g} units done, {left:g} left" if left is not None else \
        f"{done:g} units done"
    more = f"; at its measured rate it needed {left / rate:.0f} s more" if left and rate else ""
    why = reason if reason.startswith(state) else f"{state}: {reason}" if reason else state
    m._event("deadline-missed", f"platform {name}: deadline missed: {what}{more} ({why})",
             name)
