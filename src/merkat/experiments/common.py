"""What the experiments modules share: the trace run (:class:`Run`, :func:`execute`), the
scenario run description (:class:`ScenarioRun`), averaging over seeds, efficiency tables,
matplotlib (Agg) and the markdown/number formatting of ``results.md``.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from merkat import seeds
from merkat.control.utility import utility
from merkat.defaults import (
    BALANCER,
    BUDGET_BASE,
    BUDGET_RENEWAL,
    DEADLINE_FACTOR_MAX,
    DEADLINE_FACTOR_MIN,
    MECHANISM,
    PERIOD_S,
    POLICY,
    VM_OVERHEAD_S,
)
from merkat.market.types import balancer_params
from merkat.sim.schedulers import is_market
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload, build_workload
from merkat.workload.swf import SwfTrace, read_swf
from merkat.workload.traces import HPC2N, find_trace
from merkat.worlds.batch.baselines import schedule
from merkat.worlds.batch.engine import Schedule, simulate
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import simulate_market, summarize_market

MIN = 60.0
FACTORS: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(1, 11))
SLO_KINDS = ("deadline-strict", "deadline-partial", "performance-strict", "performance-partial")


@dataclass(frozen=True)
class Run:
    """One simulation of a sweep. ``label`` names its series in tables and figures."""

    label: str
    scheduler: str  # "market" or a baseline: "fcfs", "edf", "easy"
    factor: float
    seed: int
    hosts: int
    cores_per_host: int
    memory_per_host: float | None = None
    jobs: int = 1000
    skip: int = 0
    trace: str = HPC2N
    policy: str = POLICY
    random_policies: bool = False
    period: float = PERIOD_S
    policy_params: tuple[tuple[str, Any], ...] = ()  # keyword arguments of every controller
    # the market's simulated VM overheads (SLO paper §4.2: 30 s; Themis' model had none)
    boot_s: float = VM_OVERHEAD_S
    resume_s: float = VM_OVERHEAD_S
    balancer: str = BALANCER  # the market's load balancer (merkat.market.types.BALANCERS)
    # readings (merkat.experiments.readings): EDF runs hopeless jobs late ("run") or
    # discards them ("kill"); a job's utility is B ("job") or B x tasks ("tasks")
    late: str = "run"
    value_unit: str = "job"
    market: str = MECHANISM  # the market mechanism (merkat.market.mechanisms)
    fairness: bool = False  # market runs: measure the distance to DRF (sim.market.fairness)
    migration_overhead: float = 0.10  # CPU lost while a VM migrates (merkat.backends.sim)


VM_COSTS: dict[str, dict[str, float]] = {
    "none": {"boot_s": 0.0, "resume_s": 0.0, "migration_overhead": 0.0},
    "themis": {"boot_s": 0.0, "resume_s": 0.0, "migration_overhead": 0.10},
    "slo": {"boot_s": 30.0, "resume_s": 30.0, "migration_overhead": 0.10},
}
"""The readings of the VM-operation cost model (``--vm-costs``): ``none`` — every operation
free; ``themis`` — Themis' CloudSim model, no boot or resume delay, a migration takes memory /
bandwidth at 10 % CPU overhead (themis-fig5's default); ``slo`` — the SLO paper §4.2's 30-s
boot and resume on top of it (the other trace experiments' default)."""


@lru_cache(maxsize=4)
def _trace(name: str) -> SwfTrace:
    return read_swf(find_trace(name))


def workload_of(run: Run) -> tuple[Workload, Cluster]:
    cluster = Cluster(run.hosts, run.cores_per_host, run.memory_per_host)
    w = build_workload(
        _trace(run.trace),
        cluster,
        skip=run.skip,
        jobs=run.jobs,
        interarrival_factor=run.factor,
        seed=run.seed,
    )
    return w, cluster


def policies_of(run: Run, n: int) -> list[str]:
    """Each job's policy: the run's, or one of the four SLO types drawn from the run seed's
    ``policies`` stream (:mod:`merkat.seeds`)."""
    if not run.random_policies:
        return [run.policy] * n
    rng = seeds.stream(run.seed, "policies")
    return [SLO_KINDS[k] for k in rng.integers(0, len(SLO_KINDS), n)]


def baseline_work_at_deadline(w: Workload, start: np.ndarray) -> np.ndarray:
    """Fraction of each batch job's work done by its deadline (it runs at full speed from
    ``start``): what the partial utilities (SLO paper Table 1) value for a late job."""
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(w.run > 0, (w.deadline - start) / w.run, 1.0)
    out: np.ndarray = np.clip(np.nan_to_num(frac, nan=0.0), 0.0, 1.0)
    return out


def baseline_schedule(w: Workload, cluster: Cluster, run: Run) -> Schedule:
    """The batch baseline's schedule; ``late="kill"`` EDF discards hopeless jobs
    (:class:`~merkat.experiments.readings.EdfKill`)."""
    if run.late == "kill" and run.scheduler == "edf":
        from merkat.experiments.readings import EdfKill

        return simulate(w, cluster, EdfKill())
    return schedule(w, cluster, run.scheduler)


def _t_exec(t: float) -> float:
    """Submission to end; a job that never ran (NaN) never finished."""
    return math.inf if math.isnan(t) else t


def execute(run: Run) -> dict[str, Any]:
    """Run one simulation; return its row (JSON-ready; ``wall_s`` is reported apart)."""
    w, cluster = workload_of(run)
    n = len(w)
    names = policies_of(run, n)
    row: dict[str, Any] = {
        "label": run.label,
        "scheduler": run.scheduler,
        "interarrival_factor": run.factor,
        "seed": run.seed,
        "jobs": n,
    }
    if is_market(run.scheduler):
        out = simulate_market(
            w, cluster, MarketConfig(period=run.period, policy_params=dict(run.policy_params),
                                     boot_s=run.boot_s, resume_s=run.resume_s,
                                     migration_overhead=run.migration_overhead,
                                     balance=balancer_params(run.balancer), market=run.market,
                                     fairness=run.fairness),
            policies=names, seed=run.seed
        )
        s = summarize_market(w, out, cluster)
        met, value, wall = int(s["met_deadlines"]), float(s["total_value"]), s["wall_s"]
        values = out.value
        row.update(out.fairness)
        row.update(
            {
                k: s[k]
                for k in (
                    "migrations",
                    "suspends",
                    "resumes",
                    "boots",
                    "migrations_per_hour",
                    "suspend_resume_per_hour",
                    "apps_suspended",
                    "periods",
                    "ledger_audit_ok",
                    "max_cores_allocated",
                    "avg_wait_s",
                )
            }
        )
    else:
        t0 = time.perf_counter()
        sched = baseline_schedule(w, cluster, run)
        wall = time.perf_counter() - t0
        met_mask = sched.end <= w.deadline
        met = int(met_mask.sum())
        done_by_deadline = baseline_work_at_deadline(w, sched.start)
        per_job = [
            utility(
                names[k],
                budget=float(w.budget[k]),
                t_exec=_t_exec(float(sched.end[k] - w.submit[k])),
                t_deadline=float(w.deadline[k] - w.submit[k]),
                t_ideal=float(w.run[k]),
                work_done=float(done_by_deadline[k]),
                work_total=1.0,
            )
            for k in range(n)
        ]
        values = np.array(per_job, dtype=np.float64)
        value = float(sum(per_job))  # the builtin sum, in job order, as the results were
        started = ~np.isnan(sched.start)
        row["avg_wait_s"] = float((sched.start - w.submit)[started].mean()) if started.any() \
            else 0.0
    row["met_deadlines"] = met
    row["met_deadlines_pct"] = 100.0 * met / n if n else 0.0
    row["total_value"] = value
    row["_value_tasks"] = float((values * w.procs).sum())  # B x tasks per job (readings)
    if run.value_unit == "tasks":
        row["total_value"] = row["_value_tasks"]
    row["_wall_s"] = wall
    return row


def mean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Average the per-seed rows of each (factor, label)."""
    groups: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["interarrival_factor"], r["label"]), []).append(r)
    out = []
    for (factor, label), rs in sorted(groups.items()):
        row: dict[str, Any] = {"interarrival_factor": factor, "scheduler": label}
        for key in rs[0]:
            if key in ("label", "scheduler", "interarrival_factor", "seed") or key.startswith("_"):
                continue
            vals = [r[key] for r in rs]
            if all(isinstance(v, bool) for v in vals):
                row[key] = all(vals)
            elif all(isinstance(v, (int, float)) for v in vals):
                row[key] = float(np.mean(vals))
        row["seeds"] = len(rs)
        out.append(row)
    return out


def efficiency_table(
    rows: list[dict[str, Any]], market: str, baselines: dict[str, str]
) -> list[dict[str, Any]]:
    by = {(r["interarrival_factor"], r["scheduler"]): r["total_value"] for r in rows}
    out = []
    for f in sorted({r["interarrival_factor"] for r in rows}):
        e: dict[str, Any] = {"interarrival_factor": f}
        for key, label in baselines.items():
            base = by.get((f, label), 0.0)
            e[key] = by.get((f, market), 0.0) / base if base > 0 else None
        out.append(e)
    return out


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Lay out ``fig``, write it to ``path`` (PNG, 100 dpi) and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


COMMON = {
    "trace": HPC2N,
    "skip": 0,
    "jobs": 1000,
    "period_s": PERIOD_S,
    "deadline_factor": [DEADLINE_FACTOR_MIN, DEADLINE_FACTOR_MAX],
    "budget_base": BUDGET_BASE,
    "budget_renewal": BUDGET_RENEWAL,
    "budget": "B = B_base / deadline factor per core per period; initial B·procs, "
    "renewed at B·procs·20/60 per period, capped at the initial budget",
}


@dataclass(frozen=True)
class ScenarioRun:
    """One seeded run of a scenario experiment; ``label`` names its series."""

    label: str
    seed: int
    value: float = 0.0  # the swept value (a deadline, an inter-arrival factor...)
    scheduler: str = "market"


def mode(values: Sequence[int]) -> int:
    """The most frequent value (the largest among ties)."""
    counts = Counter(values)
    return max(counts, key=lambda v: (counts[v], v))


def series_plot(ax: Any, rows: list[dict[str, Any]], labels: Sequence[str], key: str) -> None:
    styles = ("o-", "s--", "^:", "d-.", "v-", "x--", "+:")
    for label, style in zip(labels, styles, strict=False):
        pts = [
            (r["interarrival_factor"], r[key]) for r in rows if r["scheduler"] == label and key in r
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=label)
    ax.legend(fontsize=7)


def mean(values: Sequence[Any]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return float(np.mean(xs)) if xs else None


def div(x: float | None, d: float) -> float | None:
    return None if x is None else x / d


def fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def markdown(doc: dict[str, Any]) -> str:
    """The rows (and efficiency, if any) as markdown tables; an experiment whose derived data
    carries its own ``markdown`` text gets that instead."""
    if "markdown" in doc:
        return str(doc["markdown"])
    lines = [
        f"# {doc['title']}",
        "",
        f"Paper: {doc['paper_claim']}",
        "",
        "| inter-arrival factor | scheduler | deadlines met (%) | total value | "
        "migrations/h | suspend+resume/h | apps suspended |",
        "|---|---|---|---|---|---|---|",
    ]

    def fmt(x: Any) -> str:
        if x is None:
            return "-"
        return f"{x:.2f}" if isinstance(x, float) else str(x)

    for r in doc["rows"]:
        lines.append(
            f"| {r['interarrival_factor']:.1f} | {r['scheduler']} | "
            f"{fmt(r.get('met_deadlines_pct'))} | {fmt(r.get('total_value'))} | "
            f"{fmt(r.get('migrations_per_hour'))} | {fmt(r.get('suspend_resume_per_hour'))} | "
            f"{fmt(r.get('apps_suspended'))} |"
        )
    if doc.get("efficiency"):
        lines += [
            "",
            "| inter-arrival factor | efficiency vs FCFS | efficiency vs EDF |",
            "|---|---|---|",
        ]
        for e in doc["efficiency"]:
            lines.append(
                f"| {e['interarrival_factor']:.1f} | {fmt(e['vs_fcfs'])} | {fmt(e['vs_edf'])} |"
            )
    lines.append("")
    return "\n".join(lines)
