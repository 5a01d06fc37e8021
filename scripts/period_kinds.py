"""Where a run's time goes by kind of period: ``merkat bench period`` with each period timed.

Usage: ``PYTHONPATH=src python scripts/period_kinds.py [--jobs N] [--trace T] [--admission S]``

Each ``Driver.step`` is timed with ``time.process_time`` and classed by what it did: *quiet*
when the platform reused its last clearing and plan (``Plans.reused``) and changed no
application (``Decision.apps`` empty), else by how many applications it changed and whether
the load balancer's search ran; the clearing itself (``merkat.market.clear``) is timed
inside it. The admission points are timed as a whole. Prints one JSON object: per kind the
periods, the CPU µs a period, the clearing's µs and VMs, and the active applications on
average (docs/benchmarks.md, "Issue 28, twenty-third session: where the time goes by kind
of period"). The counters cost a little; compare kinds, not runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections import defaultdict
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=0, help="the first N jobs (0: all)")
    ap.add_argument("--trace", default="HPC2N-2002-2.2-cln")
    ap.add_argument("--admission", type=float, default=10.0)
    args = ap.parse_args()
    if args.jobs < 0 or args.admission < 0:
        ap.error("--jobs and --admission must be >= 0")
    from merkat.workload.traces import TraceNotFound, find_trace
    try:
        find_trace(args.trace)
    except TraceNotFound as e:
        ap.error(str(e))  # one line, exit 2
    from merkat.core import period
    from merkat.market import mechanisms
    from merkat.runtime import driver
    clear_mod = importlib.import_module("merkat.market.clear")  # (the package exports a function)

    now: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    clock = time.process_time
    decide, clear, step, admit = (period.Platform.decide, clear_mod.clear, driver.Driver.step,
                                  driver.Driver.admission_point)

    def decide_(self: Any, *a: Any, **k: Any) -> Any:
        d = decide(self, *a, **k)
        now.update(apps=len(self.active), changed=len(d.apps), reused=self._plans.reused)
        return d

    def clear_(*a: Any, **k: Any) -> Any:
        t = clock()
        r = clear(*a, **k)
        now.update(clear=now.get("clear", 0.0) + clock() - t, search=r.balance.ran,
                   vms=len(r.host))
        return r

    def step_(self: Any, *a: Any, **k: Any) -> Any:
        now.clear()
        t = clock()
        r = step(self, *a, **k)
        rows.append(dict(now, t=clock() - t))
        return r

    points = [0, 0.0]

    def admit_(self: Any, *a: Any, **k: Any) -> Any:
        t = clock()
        r = admit(self, *a, **k)
        points[0] += 1
        points[1] += clock() - t
        return r

    period.Platform.decide = decide_  # type: ignore[method-assign]
    mechanisms.clear = clear_  # (the mechanism's own reference to the function)
    driver.Driver.step, driver.Driver.admission_point = step_, admit_  # type: ignore[method-assign]
    from merkat.bench.period import run

    t0 = clock()
    out = run(args.trace, jobs=args.jobs, interarrival_factor=1.0, seed=0, hosts=240,
              workers=1, admission=args.admission)
    total = clock() - t0
    kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0])
    for r in rows:
        n = r.get("changed", 0)
        if r.get("reused"):
            kind = "quiet" if n == 0 else "plan reused, some changed"
        else:
            band = "1-2" if n <= 2 else "3-5" if n <= 5 else "6-20" if n <= 20 else ">20"
            kind = f"new clearing, {band} changed, " + ("search" if r.get("search") else
                                                         "no search")
        v = kinds[kind]
        v[0] += 1
        v[1] += r["t"]
        v[2] += r.get("clear", 0.0)
        v[3] += r.get("vms", 0)
        v[4] += r.get("apps", 0)
    print(json.dumps({
        "bench": {k: v for k, v in out.items() if k != "pieces"}, "cpu_s": round(total, 2),
        "periods_s": round(sum(r["t"] for r in rows), 2),
        "admission_points": {"count": points[0], "s": round(points[1], 2)},
        "kinds": [{"kind": k, "periods": int(n), "us_per_period": round(1e6 * t / n),
                   "clearing_us": round(1e6 * c / n), "clearing_vms": round(vms / n),
                   "apps": round(apps / n, 1)}
                  for k, (n, t, c, vms, apps) in sorted(kinds.items())],
    }, indent=1))


if __name__ == "__main__":
    main()
