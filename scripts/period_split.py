"""Where a period's time goes: ``merkat bench period`` with each part of the loop timed.

Usage: ``PYTHONPATH=src python scripts/period_split.py [--jobs N] [--admission S]``

Wraps the functions of each part of a period (controllers, reconcile, market input, clearing,
load balancing, plan and bills, commit, admission points, backend advance, apply and reports,
bank) with a CPU-time counter (``time.process_time``) that charges each part its *own* time (a
part called inside another is subtracted from the caller), per top-level phase: the periods
(``Driver.step``) and the admission points between them. Prints one JSON object: per part its
seconds, share of the total and microseconds per period and per application-period (the active
applications a period decides for). The counters cost a few per cent; the relative split is
what it is for (docs/benchmarks.md, "Where a period's time goes").
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import time
from collections import defaultdict
from typing import Any

_own: dict[tuple[str, str], float] = defaultdict(float)
_calls: dict[tuple[str, str], int] = defaultdict(int)
_stack: list[list[Any]] = []  # [label, start, children's time]
_top = ["other"]


def timed(label: str, fn: Any, top: str | None = None) -> Any:
    clock = time.process_time

    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        if top is not None:
            saved = _top[0]
            _top[0] = top
        frame: list[Any] = [label, clock(), 0.0]
        _stack.append(frame)
        try:
            return fn(*a, **k)
        finally:
            _stack.pop()
            spent = clock() - frame[1]
            key = (_top[0], label)
            _own[key] += spent - frame[2]
            _calls[key] += 1
            if _stack:
                _stack[-1][2] += spent
            if top is not None:
                _top[0] = saved

    return wrapper


def patch(obj: Any, name: str, label: str, top: str | None = None) -> None:
    setattr(obj, name, timed(label, getattr(obj, name), top))


def install() -> None:
    from merkat.backends import sim
    from merkat.bank import memory
    from merkat.core import admission, period, reconcile
    clear = importlib.import_module("merkat.market.clear")  # (the package exports a function)
    from merkat.runtime import driver, economy

    patch(driver.Driver, "step", "driver (observed, metrics)", top="period")
    patch(driver.Driver, "admission_point", "driver (admission)", top="admission point")
    patch(sim.SimBackend, "advance", "backend advance", top="between periods")
    patch(sim.SimBackend, "apply", "backend apply")
    patch(sim.SimBackend, "observe", "backend reports")  # (the driver's one call per period)
    for name in ("renew", "charge", "redistribute", "close"):
        patch(economy.Economy, name, "bank")
    patch(memory.MemoryLedger, "balances", "bank")
    for mod in (period, admission):
        patch(mod, "ask", "controllers")
        patch(mod, "draft", "reconcile")
    from merkat.core import market_input
    patch(market_input.MarketInput, "__call__", "market input")
    patch(admission, "market_rows", "market input")
    from merkat.core import plan
    # (the batched controllers run inside the decide loop since the fifteenth session, one
    # pass per application: their time is in "decide (loop)"; a counter per application
    # would cost as much as what it counts)
    patch(plan.Plans, "__call__", "plan and bills")
    patch(plan.Bills, "__call__", "plan and bills")
    patch(admission, "make_plan", "plan and bills")
    patch(admission, "bills_of", "plan and bills")
    if hasattr(admission, "_plan_bills"):  # (23rd session: a kept point's, from its lists)
        patch(admission, "_plan_bills", "plan and bills")
    if hasattr(period, "bidding_vms"):  # (since the seventeenth session the decide loop
        patch(period, "bidding_vms", "market input")  # makes the runs as it decides)
    from merkat.core import running
    patch(running.RunningRows, "__call__", "market input")
    patch(admission, "place", "clearing")
    from merkat.core import admission_keep  # (the kept state's path: issue 28, 17th session)
    patch(admission_keep.AdmissionKeep, "place", "clearing")
    patch(admission_keep.AdmissionKeep, "record", "clearing")
    patch(admission_keep.AdmissionKeep, "valid", "market input")
    if hasattr(admission_keep.AdmissionKeep, "valid_among"):  # (the 21st session's one pass)
        patch(admission_keep.AdmissionKeep, "valid_among", "market input")
    patch(reconcile.Decider, "observe", "observe")
    patch(reconcile.Decider, "reconcile", "reconcile")
    patch(reconcile.Decider, "broke_since", "reconcile")
    patch(period.Platform, "decide", "decide (loop)")
    patch(period.Platform, "_clear", "clearing")
    patch(clear, "search_mapping", "load balancing")
    patch(period.Platform, "commit", "commit")
    patch(period.Platform, "settle", "commit")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--admission", type=float, default=10.0)
    ap.add_argument("--trace", default="HPC2N-2002-2.2-cln")
    ap.add_argument("--fig5", type=float, default=None, metavar="FACTOR",
                    help="split themis-fig5's market run at this inter-arrival factor instead")
    args = ap.parse_args()
    one = None
    if args.fig5 is not None:  # (checked before anything runs: a one-line error, exit 2)
        from profile_fig5_run import market_run  # (this script's folder is on the path)
        one = market_run(ap, args.fig5)
    install()
    from merkat.bench.period import run
    from merkat.core import period

    apps = [0]
    decide = period.Platform.decide

    def counting(self: Any, *a: Any, **k: Any) -> Any:
        apps[0] += len(self.active)
        return decide(self, *a, **k)

    period.Platform.decide = counting  # type: ignore[method-assign]
    t0 = time.process_time()
    if one is not None:
        from merkat.experiments.common import execute
        out = {k: v for k, v in execute(one).items() if not isinstance(v, (list, dict))}
    else:
        out = run(args.trace, jobs=args.jobs, interarrival_factor=1.0, seed=0, hosts=240,
                  workers=1, admission=args.admission)
    total = time.process_time() - t0
    periods = out["periods"]
    _own[("other", "reading the trace, the run's set-up")] = total - sum(_own.values())
    parts = sorted(_own.items(), key=lambda kv: -kv[1])
    print(json.dumps({
        "bench": out, "total_cpu_s": round(total, 2), "app_periods": apps[0],
        "parts": [{"phase": top, "part": label, "s": round(s, 2),
                   "share": round(s / total, 3), "calls": _calls[(top, label)],
                   "us_per_period": round(1e6 * s / periods, 1),
                   "us_per_app_period": round(1e6 * s / max(1, apps[0]), 2)}
                  for (top, label), s in parts],
    }, indent=1))


if __name__ == "__main__":
    main()
