"""Merkat §5.4.3's experiment, ``merkat-satisfaction``: 30 rigid Lublin jobs of 1-8 processes
on 4 nodes × 8 cores, budgets inversely proportional to deadlines, satisfaction ±B: the market
(``deadline-strict``) vs EASY backfilling and the Maui-like baseline
(:mod:`merkat.worlds.batch.maui`), over a range of loads. Decisions in ``docs/experiments.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from merkat import seeds
from merkat.control.utility import efficiency, merkat_satisfaction
from merkat.defaults import (
    BUDGET_BASE,
    BUDGET_RENEWAL,
    DEADLINE_FACTOR_MAX,
    DEADLINE_FACTOR_MIN,
    LIVE_PERIOD_S,
    POLICY,
)
from merkat.experiments.common import ScenarioRun, fmt, mean, pyplot
from merkat.experiments.registry import Experiment
from merkat.sim.schedulers import is_market
from merkat.workload import lublin
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.batch.baselines import schedule
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market

# --- merkat-satisfaction --------------------------------------------------------------------------

SATISFACTION: dict[str, Any] = {
    "hosts": 4,
    "cores_per_host": 8,
    "vm": {"cpu": 1.0},
    "memory": "not traded; 900 MB per VM always fits",
    "jobs": 30,
    "lublin": {"jobtype": "typeless", "nodes": 32, "generated": 200, "max_procs": 8},
    "job_selection": "the first 30 generated jobs of at most 8 processes (the model cannot be "
                     "parameterised for an 8-node machine, docs/experiments.md)",
    "run_floor_s": 600.0,
    "interarrival_factors": [1.0, 0.5, 0.25, 0.1, 0.05],
    "deadline_factor": [DEADLINE_FACTOR_MIN, DEADLINE_FACTOR_MAX],
    "deadline_factor_rng": "the seed's deadline-factors stream (merkat.seeds); the Lublin "
                           "jobs come from its workload stream",
    "budget_base": BUDGET_BASE,
    "budget_renewal": BUDGET_RENEWAL,
    "budget": "B = B_base / deadline factor credits per core per period; initial B·procs, "
              "renewed at B·procs·20/60 per period, capped at the initial budget",
    "satisfaction": "+B if the job ends by its deadline, -B otherwise (Merkat §5.4.3), "
                    "B = B_base / deadline factor",
    "period_s": LIVE_PERIOD_S,
    "market_policy": POLICY,
    "baseline": "easy (EASY backfilling, exact run-time estimates)",
    "baseline_maui": "maui (FCFS by queue time, EASY backfilling on Tsafrir-like inexact "
                     "wall-time estimates from the seed's estimates stream, "
                     "merkat.worlds.batch.maui)",
}


def satisfaction_workload(seed: int, factor: float,
                          deadline_factor: tuple[float, float] | None = None) -> Workload:
    """The 30 jobs of one seed, submit times multiplied by ``factor`` from the first;
    ``deadline_factor`` (lo, hi) replaces the paper's U[1.2, 10] (the readings of
    :mod:`.satisfaction_readings`)."""
    p = SATISFACTION
    lp = p["lublin"]
    swf = lublin.generate(lp["generated"], seed, nodes=lp["nodes"], jobtype=lp["jobtype"])
    swf = swf[swf[:, 4] <= lp["max_procs"]][: p["jobs"]]
    if len(swf) < p["jobs"]:
        raise RuntimeError(f"seed {seed}: only {len(swf)} Lublin jobs of <= 8 processes")
    lo, hi = p["deadline_factor"] if deadline_factor is None else deadline_factor
    x = seeds.stream(seed, "deadline-factors").uniform(lo, hi, len(swf))
    submit = (swf[:, 1] - swf[0, 1]) * factor
    run = np.maximum(swf[:, 3], p["run_floor_s"])
    return Workload.from_arrays(submit, run, swf[:, 4].astype(np.int64), deadline_factor=x,
                                budget_base=p["budget_base"])


def _satisfaction_runs(seeds: int, jobs: int | None,
                       factors: Sequence[float]) -> list[ScenarioRun]:
    return [ScenarioRun(s, k, f, s) for f in SATISFACTION["interarrival_factors"]
            for k in range(seeds) for s in ("market", "easy", "maui")]


def merkat_satisfaction_run(run: ScenarioRun) -> dict[str, Any]:
    """One load and seed under the market, EASY or Maui: deadlines met and satisfaction."""
    t0 = time.perf_counter()
    w = satisfaction_workload(run.seed, run.value)
    row = satisfaction_row(w, run.scheduler, run.seed)
    return {"label": run.label, "scheduler": run.scheduler, "seed": run.seed,
            "interarrival_factor": run.value, **row, "_wall_s": time.perf_counter() - t0}


def satisfaction_row(w: Workload, scheduler: str, seed: int,
                     baseline_boot_s: float = 0.0) -> dict[str, Any]:
    """``w`` under the market or a batch baseline: jobs, offered load, deadlines met,
    satisfaction (and the market's suspends, audit, aborted jobs). ``baseline_boot_s``: each
    batch job also runs that long first (a VM boot, as the market's VMs pay), its deadline
    unchanged."""
    p = SATISFACTION
    cluster = Cluster(p["hosts"], p["cores_per_host"], None)
    extra: dict[str, Any] = {}
    if is_market(scheduler):
        out = simulate_market(w, cluster, MarketConfig(policy=p["market_policy"],
                                                       period=p["period_s"],
                                                       budget_base=p["budget_base"],
                                                       budget_renewal=p["budget_renewal"]),
                              seed=seed)
        met = out.met
        extra = {"suspends": out.counts.get("suspend", 0), "ledger_audit_ok": out.audit_ok,
                 "aborted": int((~out.finished).sum())}
    else:
        booted = w if not baseline_boot_s else replace(
            w, run=w.run + baseline_boot_s, estimate=w.estimate + baseline_boot_s)
        sched = schedule(booted, cluster, scheduler, seed=seed)
        met = sched.end <= w.deadline + 1e-9
    values = [merkat_satisfaction(float(b), bool(m)) for b, m in zip(w.budget, met, strict=True)]
    return {
        "jobs": len(w),
        "offered_load": float((w.run * w.procs).sum() / cluster.total_cores
                              / max(float(w.submit[-1] - w.submit[0]), p["period_s"])),
        "met_deadlines": int(np.sum(met)),
        "satisfaction": float(sum(values)),
        **extra,
    }


def _satisfaction_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    table = []
    for f in SATISFACTION["interarrival_factors"]:
        by = {s: [r for r in rows if r["interarrival_factor"] == f and r["scheduler"] == s]
              for s in ("market", "easy", "maui")}
        m = sum(r["satisfaction"] for r in by["market"])
        e = sum(r["satisfaction"] for r in by["easy"])
        ratio = efficiency(m, e)
        ratio_maui = efficiency(m, sum(r["satisfaction"] for r in by["maui"]))
        table.append({
            "interarrival_factor": f,
            "seeds": len(by["market"]),
            "offered_load": mean([r["offered_load"] for r in by["market"]]),
            "market_met": mean([r["met_deadlines"] for r in by["market"]]),
            "easy_met": mean([r["met_deadlines"] for r in by["easy"]]),
            "market_satisfaction": mean([r["satisfaction"] for r in by["market"]]),
            "easy_satisfaction": mean([r["satisfaction"] for r in by["easy"]]),
            "ratio": ratio if math.isfinite(ratio) else None,
            "maui_met": mean([r["met_deadlines"] for r in by["maui"]]),
            "maui_satisfaction": mean([r["satisfaction"] for r in by["maui"]]),
            "ratio_maui": ratio_maui if math.isfinite(ratio_maui) else None,
        })
    md = [
        "# Merkat §5.4.3: user satisfaction, market vs EASY backfilling and Maui",
        "",
        "Paper: with 30 Lublin jobs on 4 nodes × 8 cores, Merkat gives 2.79 times Maui's "
        "total satisfaction (±B per job).",
        "",
        "| inter-arrival factor | offered load | met (market) | met (EASY) | met (Maui) | "
        "satisfaction (market) | satisfaction (EASY) | satisfaction (Maui) | market / EASY | "
        "market / Maui |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        md.append(
            f"| {r['interarrival_factor']:g} | {fmt(r['offered_load'])} | "
            f"{fmt(r['market_met'])}/30 | {fmt(r['easy_met'])}/30 | {fmt(r['maui_met'])}/30 | "
            f"{fmt(r['market_satisfaction'])} | {fmt(r['easy_satisfaction'])} | "
            f"{fmt(r['maui_satisfaction'])} | {fmt(r['ratio'])} | {fmt(r['ratio_maui'])} |")
    md.append("")
    return {"rows": table, "markdown": "\n".join(md)}


def _satisfaction_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    rows = doc["rows"]
    x = np.arange(len(rows))
    labels = [f"{r['interarrival_factor']:g}\n(load {r['offered_load']:.2f})" for r in rows]
    a.bar(x - 0.27, [r["market_satisfaction"] for r in rows], 0.27, label="market")
    a.bar(x, [r["easy_satisfaction"] for r in rows], 0.27, label="EASY backfilling")
    a.bar(x + 0.27, [r["maui_satisfaction"] for r in rows], 0.27, label="Maui-like")
    a.axhline(0, color="grey", lw=0.8)
    a.set_xticks(x, labels, fontsize=8)
    a.set(xlabel="inter-arrival factor", ylabel="total satisfaction (±B)",
          title="(a) user satisfaction")
    a.legend(fontsize=8)
    ratios = [r["ratio"] if r["ratio"] is not None else np.nan for r in rows]
    b.plot(x, ratios, "o-", label="market / EASY")
    b.plot(x, [r["ratio_maui"] if r["ratio_maui"] is not None else np.nan for r in rows], "s-",
           label="market / Maui")
    b.axhline(2.79, color="C3", ls="--", lw=1, label="paper: 2.79 (vs Maui)")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set_xticks(x, labels, fontsize=8)
    b.set(xlabel="inter-arrival factor", ylabel="satisfaction ratio",
          title="(b) market / batch")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


EXPERIMENT = Experiment(
    "merkat-satisfaction", "Merkat §5.4.3: user satisfaction, market vs batch scheduler",
    "Merkat provides 2.79 times more value (±B satisfaction) than Maui (FCFS + backfilling).",
    _satisfaction_runs, _satisfaction_derive, _satisfaction_plot, dict(SATISFACTION),
    merkat_satisfaction_run, sweeps_load=False)
"""The experiment, registered by :mod:`merkat.experiments.merkat` (after merkat-fig6)."""
