"""``merkat bench market``: one full clear of a random heterogeneous cluster (allocate, place,
balance), timed; :func:`run` returns the JSON object (docs/benchmarks.md, "Market")."""

from __future__ import annotations

import time
from typing import Any


def run(vms: int, hosts: int, seed: int, placed: float) -> dict[str, Any]:
    """Generate ``vms`` VMs on ``hosts`` hosts (``placed``: the fraction already on a random
    host) from ``seed`` and time one :func:`~merkat.market.clear` of them."""
    from merkat.market import clear
    from merkat.market.generate import random_market

    h, v = random_market(vms, hosts, seed, placed)
    t0 = time.perf_counter()
    result = clear(h, v)
    total = time.perf_counter() - t0
    return {
        "vms": vms,
        "hosts": hosts,
        "seed": seed,
        "placed_fraction": placed,
        "allocate_s": round(result.timings["allocate_s"], 4),
        "place_s": round(result.timings["place_s"], 4),
        "balance_s": round(result.timings["balance_s"], 4),
        "total_s": round(total, 4),
        "balance_iterations": result.balance.iterations,
        "migrations": len(result.migrations),
        "rms_error_before": round(result.balance.rms_before, 6),
        "rms_error_after": round(result.balance.rms_after, 6),
    }
