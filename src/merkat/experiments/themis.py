"""Themis' experiments (Themis §IV): ``themis-fig5`` and ``themis-fig6``.

- ``themis-fig5`` — Themis Fig. 5(a, b): HPC2N, first 1,000 jobs, 240 hosts × 1 core, the
  market vs FCFS vs EDF: % deadlines met and efficiency;
- ``themis-fig6`` — Themis §IV-E, Fig. 6: one elastic master-worker application (1,075 tasks
  of U[1, 40] min, deadline 643.25 min, 1,500 more tasks at minute 85) under
  ``horizontal-deadline`` on 240 hosts × 1 core; VMs over time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from merkat import seeds
from merkat.backends.sim import TaskFarm
from merkat.defaults import ADMISSION_S, PERIOD_S, RESERVE_PRICE, VM_OVERHEAD_S
from merkat.experiments.common import (
    COMMON,
    MIN,
    Run,
    ScenarioRun,
    efficiency_table,
    fmt,
    mean,
    mean_rows,
    mode,
    pyplot,
)
from merkat.experiments.registry import EXPERIMENTS, Experiment
from merkat.worlds.merkat.scenarios import Scenario, spec

# --- themis-fig5 -------------------------------------------------------------------------


def _fig5_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    return [
        Run(label=s, scheduler=s, factor=f, seed=k, hosts=240, cores_per_host=1, jobs=jobs or 1000,
            policy="vertical-deadline" if s == "market" else "deadline-strict",  # the baselines'
            boot_s=0.0, resume_s=0.0)                                       # values: strict
        for f in factors
        for k in range(seeds)
        for s in ("market", "fcfs", "edf")
    ]


def _fig5_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    mean = mean_rows(rows)
    return {
        "rows": mean,
        "efficiency": efficiency_table(mean, "market", {"vs_fcfs": "fcfs", "vs_edf": "edf"}),
    }


def _fig5_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for label, style in (("market", "o-"), ("fcfs", "s--"), ("edf", "^:")):
        pts = [
            (r["interarrival_factor"], r["met_deadlines_pct"])
            for r in doc["rows"]
            if r["scheduler"] == label
        ]
        if pts:
            a.plot(
                *zip(*pts, strict=True),
                style,
                label=label.upper() if label != "market" else "market",
            )
    a.set(
        xlabel="inter-arrival factor",
        ylabel="deadlines met (%)",
        title="(a) applications meeting their deadline",
    )
    a.legend()
    for key, style, label in (("vs_fcfs", "s--", "vs FCFS"), ("vs_edf", "^:", "vs EDF")):
        pts = [(e["interarrival_factor"], e[key]) for e in doc["efficiency"] if e[key] is not None]
        if pts:
            b.plot(*zip(*pts, strict=True), style, label=label)
    b.axhline(1.0, color="grey", lw=0.8)
    b.set(
        xlabel="inter-arrival factor",
        ylabel="efficiency (market value / baseline value)",
        title="(b) efficiency",
    )
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- themis-fig6 ----------------------------------------------------------------------------------

THEMIS6: dict[str, Any] = {
    "hosts": 240,
    "cores_per_host": 1,
    "period_s": PERIOD_S,
    "reserve": RESERVE_PRICE,
    "vm": {"cpu": 1.0},
    "policy": "horizontal-deadline",
    "policy_params": {"limit": 3, "low": 0.75, "high": 1.0},
    "initial_vms": 1,
    "tasks": 1075,
    "task_duration_s": [60.0, 2400.0],
    "task_duration": "uniform in [1, 40] min at full speed, drawn from the seed's workload "
                     "stream (merkat.seeds: numpy default_rng(seed))",
    "deadline_s": 643.25 * MIN,
    "burst_at_s": 85 * MIN,
    "burst_tasks": 1500,
    "budget": 100.0,
    "renewal_per_period": 100.0,
    "boot_s": VM_OVERHEAD_S,
    "horizon_s": 2 * 643.25 * MIN,
}


def _themis6_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[ScenarioRun]:
    return [ScenarioRun("elastic", k) for k in range(seeds)]


def themis_fig6(run: ScenarioRun) -> dict[str, Any]:
    """One run of Themis Fig. 6; the row holds the VM series and the headline figures."""
    t0 = time.perf_counter()
    p = THEMIS6
    rng = seeds.stream(run.seed, seeds.WORKLOAD)
    lo, hi = p["task_duration_s"]
    first = rng.uniform(lo, hi, p["tasks"]).tolist()
    burst = rng.uniform(lo, hi, p["burst_tasks"]).tolist()
    sc = Scenario(hosts=p["hosts"], cores=p["cores_per_host"], period=p["period_s"],
                  reserve=p["reserve"], seed=run.seed)
    farm = TaskFarm(first)
    sc.add(spec("elastic", p["policy"], size=p["initial_vms"], budget=p["budget"],
                renewal=p["renewal_per_period"], deadline=p["deadline_s"],
                params=p["policy_params"]), farm)
    sc.at(p["burst_at_s"], lambda _: farm.add_tasks(burst))
    res = sc.run(p["horizon_s"])
    vms = [v or 0 for v in res.series["elastic"]["vms"]]
    queued = res.series["elastic"]["queued"]
    period = p["period_s"]
    b = math.ceil(p["burst_at_s"] / period)  # the first period that sees the burst
    after = [v for v, q in zip(vms[b:], queued[b:], strict=True) if q]
    rise = next((k for k in range(b, len(vms)) if vms[k] > vms[b - 1]), None)
    app = res.apps["elastic"]
    return {
        "label": run.label,
        "seed": run.seed,
        "vms_before_burst": vms[b - 1],
        "vms_plateau_before_burst": mode(vms[:b]),
        "vms_equilibrium_after_burst": mode(after) if after else 0,
        "vms_peak": max(vms),
        "periods_to_first_rise_after_burst": None if rise is None else rise - b + 1,
        "finish_s": app["finish_s"],
        "deadline_met": app["finish_s"] is not None and app["finish_s"] <= p["deadline_s"],
        "tasks_total": p["tasks"] + p["burst_tasks"],
        "boots": res.counts.get("boot", 0),
        "ledger_audit_ok": res.audit_ok,
        "series": {"period": list(range(len(vms))), "vms": vms,
                   "tasks_queued": [q or 0 for q in queued],
                   "tasks_running": [r or 0 for r in res.series["elastic"]["running"]]},
        "_wall_s": time.perf_counter() - t0,
    }


def _themis6_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("vms_plateau_before_burst", "vms_before_burst", "vms_equilibrium_after_burst",
            "vms_peak", "periods_to_first_rise_after_burst", "finish_s")
    summary = {k: mean([r[k] for r in rows]) for k in keys}
    summary["deadline_met_runs"] = sum(bool(r["deadline_met"]) for r in rows)
    summary["runs"] = len(rows)
    md = [
        "# Themis Fig. 6: elastic scaling of a master-worker application",
        "",
        "Paper: about 44 VMs, then (after 1,500 more tasks at minute 85) more VMs, first "
        "incrementally then aggressively, an overshoot, and an equilibrium near 116 VMs; idle "
        "VMs are shut down at the end.",
        "",
        "| figure | ours (mean over seeds) | paper |",
        "|---|---|---|",
        f"| VMs before the burst (plateau) | {fmt(summary['vms_plateau_before_burst'])} | ~44 |",
        f"| VMs after the burst (equilibrium) | "
        f"{fmt(summary['vms_equilibrium_after_burst'])} | ~116 |",
        f"| peak VMs | {fmt(summary['vms_peak'])} | overshoot above 116 |",
        f"| periods from the burst to the first added VM | "
        f"{fmt(summary['periods_to_first_rise_after_burst'])} | - |",
        f"| finish (min) vs deadline 643.25 min | "
        f"{fmt(None if summary['finish_s'] is None else summary['finish_s'] / MIN)} | "
        f"before the deadline |",
        f"| runs meeting the deadline | {summary['deadline_met_runs']}/{summary['runs']} | - |",
        "",
    ]
    return {"summary": summary, "markdown": "\n".join(md)}


def _themis6_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    row = doc["runs"][0]
    s = row["series"]
    ax.plot(s["period"], s["vms"], "-", color="C0", label="VMs")
    ax.set(xlabel="time (scheduling intervals of 5 min)", ylabel="virtual machines",
           title=f"Themis Fig. 6: application elastic scaling (seed {row['seed']})")
    burst = THEMIS6["burst_at_s"] / THEMIS6["period_s"]
    ax.axvline(burst, color="grey", ls=":", lw=1)
    ax.text(burst + 1, max(s["vms"]) * 0.05, "+1,500 tasks", color="grey", fontsize=8)
    ax2 = ax.twinx()
    ax2.plot(s["period"], s["tasks_queued"], "--", color="C1", lw=0.8, label="queued tasks")
    ax2.set_ylabel("queued tasks", color="C1")
    ax.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


EXPERIMENTS.register(Experiment(
        "themis-fig5",
        "Themis Fig. 5: SLO satisfaction and efficiency on HPC2N",
        "The market beats FCFS and EDF at light load; at high load it gives about 2x "
        "FCFS's value and loses up to 25 % to EDF.",
        _fig5_runs,
        _fig5_derive,
        _fig5_plot,
        {
            **COMMON,
            "cluster": "240 hosts x 1 core, memory not traded",
            "policy": "vertical-deadline",
            "admission_s": ADMISSION_S,
            "vm_overheads": "none (Themis' CloudSim model; the SLO paper added 30 s boot/resume)",
            "schedulers": ["market", "fcfs", "edf"],
        },
        takes_policy=True,
))
EXPERIMENTS.register(Experiment(
    "themis-fig6", "Themis Fig. 6: elastic scaling of a master-worker application",
    "About 44 VMs, then after 1,500 more tasks at minute 85 an incremental then aggressive "
    "increase, an overshoot and an equilibrium near 116 VMs.",
    _themis6_runs, _themis6_derive, _themis6_plot, dict(THEMIS6), themis_fig6,
    sweeps_load=False))
