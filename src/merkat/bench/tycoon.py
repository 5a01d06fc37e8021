"""``merkat bench tycoon``: Tycoon's Best Response for one user over many hosts (target
<= 10 ms at 10,000) and one tycoon-funding run (target <= 30 s); :func:`run` returns the JSON
object (docs/benchmarks.md)."""

from __future__ import annotations

import time
from typing import Any


def run(hosts: int, repeat: int, funding: bool) -> dict[str, Any]:
    """Time ``repeat`` Best Response calls over ``hosts`` hosts (uncapped and capped) and, if
    ``funding``, one tycoon-funding run."""
    import numpy as np

    from merkat import seeds
    from merkat.market.best_response import best_response

    rng = seeds.stream(0, seeds.WORKLOAD)
    w = rng.uniform(1, 4, hosts)
    y = rng.uniform(0, 2, hosts)
    caps = np.minimum(w, rng.uniform(0.5, 2, hosts))
    times = {}
    for name, c in (("uncapped", None), ("capped", caps)):
        best_response(100.0, w, y, caps=c, reserve=0.01)
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            best_response(100.0, w, y, caps=c, reserve=0.01)
            ts.append(time.perf_counter() - t0)
        times[name] = {"median_ms": round(1e3 * float(np.median(ts)), 3),
                       "max_ms": round(1e3 * max(ts), 3)}
    doc: dict[str, Any] = {"benchmark": "tycoon", "hosts": hosts, "repeat": repeat,
                           "best_response": times, "target_ms": 10.0}
    if funding:
        from merkat.experiments.tycoon import FundingRun, tycoon_funding

        t0 = time.perf_counter()
        row = tycoon_funding(FundingRun("table2-best-response", 0, 2, False))
        doc["funding_run_s"] = round(time.perf_counter() - t0, 3)
        doc["funding_target_s"] = 30.0
        doc["funding_audit_ok"] = row["audit_ok"]
    return doc
