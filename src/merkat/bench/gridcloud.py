"""``merkat bench gridcloud``: the grid-cloud simulator's speed.

- ``priority``: the ``gridcloud-priority`` workload (20 users × ``tasks`` tasks, λ⁻¹ = 50 s, two
  Small clouds, priority by risk): wall and CPU seconds, tasks and requests per second;
- ``scaling``: one Powerful cloud of K times the paper's hosts (``powerful*K``) under a load
  scaled with it (10·K users, λ⁻¹ = 7.5 s, ``scale_tasks`` tasks each), for each K: peak VMs,
  CPU microseconds per task and per request — flat if the cost per task does not grow with
  the number of VMs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from merkat.worlds.gridcloud.run import Config, Group, simulate
from merkat.worlds.gridcloud.users import Load, Strategy


def _timed(cfg: Config) -> tuple[dict[str, Any], float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    r = simulate(cfg)
    return r, time.perf_counter() - w0, time.process_time() - c0


def bench(tasks: int = 5000, scales: Sequence[int] = (1, 10), scale_tasks: int = 100,
          seed: int = 0) -> dict[str, Any]:
    """Run both measurements; a JSON-ready dict (see the module doc)."""
    cfg = Config(groups=(Group(20, tasks, Load((0.0,), (50.0,))),),
                 strategy=Strategy(True, True, "risk"), seed=seed)
    r, wall, cpu = _timed(cfg)
    out: dict[str, Any] = {
        "priority": {
            "tasks": r["tasks"], "requests": r["requests"], "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "tasks_per_s": round(r["tasks"] / wall, 1),
            "success_pct": round(r["success_pct"], 2), "audit_ok": r["bank"]["audit_ok"],
        },
        "scaling": [],
    }
    for k in scales:
        cfg = Config(providers=((f"powerful*{k}",),),
                     groups=(Group(10 * k, scale_tasks, Load((0.0,), (7.5,))),),
                     sample_period=1000.0, seed=seed)
        r, wall, cpu = _timed(cfg)
        out["scaling"].append({
            "hosts": 10 * k, "users": 10 * k, "tasks": r["tasks"], "peak_vms": r["peak_vms"],
            "requests": r["requests"], "cpu_s": round(cpu, 3),
            "cpu_us_per_task": round(1e6 * cpu / r["tasks"], 1),
            "cpu_us_per_request": round(1e6 * cpu / max(1, r["requests"]), 1),
        })
    return out
