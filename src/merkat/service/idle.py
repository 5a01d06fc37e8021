"""The template's ``keep_idle`` (Merkat Fig. 5's ``<keepidle>``; §5.3.2: "VMs are kept idle
for a specified time period, e.g., 10 minutes" before they are released).

Decision: live, a VM is *idle* from the first period its controller releases it (a horizontal
policy scaling down: the demand's ``release``). :class:`KeepIdle` wraps the platform's
controller and keeps each such VM for ``keep_idle`` seconds from then — it stays booted,
bidding the market's reserve (``bid_min``: it holds its place at the least cost, the
allocation it gets is the market's to give) — and releases it once it has been idle that
long. A VM the controller wants again meanwhile (it stops releasing it) is simply kept: no
boot, which is the point (a framework's queue that refills). A controller that knows the
parameter itself (``framework-horizontal``'s ``keep_idle``, which holds *idle workers*) gets
the template's value as that parameter instead, unless its ``params`` set one. ``0`` (the
default): VMs are released when the controller releases them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from merkat.control.base import Controller
from merkat.control.types import Action, Demand, Observation


class KeepIdle(Controller):
    """``inner``'s decisions, with the VMs it releases kept ``keep_idle`` s (module doc)."""

    def __init__(self, inner: Controller, keep_idle: float) -> None:
        super().__init__()
        self.inner = inner
        self.keep_idle = keep_idle
        self.name = inner.name  # type: ignore[misc]  # the policy it wraps names it
        self.idle_since: dict[str, float] = {}  # VM -> when its controller first released it
        self.reads_price_history = inner.reads_price_history
        self.price_history_periods = inner.price_history_periods

    def __getattr__(self, attr: str) -> Any:  # anything else is the inner controller's
        if attr == "inner":
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def decide(self, obs: Observation) -> Demand:
        return self.hold(obs, self.inner.decide(obs))

    def reconfigure(self, obs: Observation) -> Demand:
        return self.hold(obs, self.inner.reconfigure(obs))

    def hold(self, obs: Observation, d: Demand) -> Demand:
        """``d`` with the VMs released less than ``keep_idle`` s ago kept, at the reserve."""
        released = set(d.release) if d.action is Action.NONE else set()
        for vm in list(self.idle_since):
            if vm not in released:  # wanted again, or gone
                del self.idle_since[vm]
        if not released:
            return d
        kept = []
        for vm in d.release:
            since = self.idle_since.setdefault(vm, obs.time)
            if obs.time - since < self.keep_idle - 1e-9:
                kept.append(vm)
        if not kept:
            return d
        bids = dict(d.bids)
        floor = {r: v for r, v in obs.bid_min.items() if r in obs.vm_size}
        for vm in kept:
            bids[vm] = dict(floor) or dict(d.new_vm_bid)
        left = min(self.idle_since[vm] + self.keep_idle - obs.time for vm in kept)
        return replace(d, nvms=d.nvms + len(kept), bids=bids,
                       release=tuple(v for v in d.release if v not in kept),
                       reason=f"{d.reason}; {len(kept)} idle VM(s) kept (keep_idle: the first "
                              f"released in {left:.0f} s)".lstrip("; "))


def with_keep_idle(t: Any, make: Callable[[str, dict[str, Any]], Controller]) -> Controller:
    """Template ``t``'s controller (``make(policy, params)``), honouring its ``keep_idle``
    (module doc)."""
    params = dict(t.controller.params)
    if t.keep_idle <= 0:
        return make(t.controller.policy, params)
    from merkat.control.registry import PolicyError, policy_params

    try:
        known = policy_params(t.controller.policy)
    except (PolicyError, KeyError):
        known = {}
    if "keep_idle" in known:
        params.setdefault("keep_idle", t.keep_idle)
        return make(t.controller.policy, params)
    return KeepIdle(make(t.controller.policy, params), t.keep_idle)
