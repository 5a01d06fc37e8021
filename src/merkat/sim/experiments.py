"""The papers' experiments: ``merkat sim experiment NAME --out DIR [--seeds K] [--workers W]``.

An experiment is a sweep of independent :class:`Run` s (one simulation each: a scheduler, an
inter-arrival factor, a seed, a cluster), executed on a process pool (or a Dask cluster), then
aggregated into ``results.json`` (parameters, rows, derived figures), ``results.md`` (a
markdown table) and a PNG shaped like the paper's figure. ``timing.json`` holds wall-clock
times, kept apart so that the same inputs and seeds give byte-identical results files.

Registry (:data:`EXPERIMENTS`):

- ``themis-fig5`` — Themis Fig. 5(a, b): HPC2N, first 1,000 jobs, 240 hosts × 1 core, the
  market (deadline-strict) vs FCFS vs EDF: % deadlines met and efficiency;
- ``slo-fig2`` — SLO paper Fig. 2: 120 nodes × 2 cores; (a) deadline-strict with memory
  plentiful (CPU market) vs constrained at 2 GB per node (CPU + memory market), against FCFS
  and EDF; (b) each application draws one of the four SLO policies;
- ``slo-fig3`` — SLO paper Fig. 3: migrations and suspend/resume operations per hour and
  applications suspended, CPU-only vs CPU + memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from merkat.control.utility import utility
from merkat.sim.cluster import Cluster
from merkat.sim.market import MarketConfig, simulate_market, summarize_market
from merkat.sim.run import schedule
from merkat.sim.swf import SwfTrace, read_swf
from merkat.sim.traces import HPC2N, find_trace
from merkat.sim.workload import Workload, build_workload

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
    policy: str = "deadline-strict"
    random_policies: bool = False
    period: float = 300.0


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
    """Each job's policy: the run's, or one of the four SLO types drawn with the run's seed."""
    if not run.random_policies:
        return [run.policy] * n
    rng = np.random.default_rng([run.seed, 4])
    return [SLO_KINDS[k] for k in rng.integers(0, len(SLO_KINDS), n)]


def baseline_work_at_deadline(w: Workload, start: np.ndarray) -> np.ndarray:
    """Fraction of each batch job's work done by its deadline (it runs at full speed from
    ``start``): what the partial utilities (SLO paper Table 1) value for a late job."""
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(w.run > 0, (w.deadline - start) / w.run, 1.0)
    return np.clip(frac, 0.0, 1.0)


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
    if run.scheduler == "market":
        out = simulate_market(
            w, cluster, MarketConfig(period=run.period), policies=names, seed=run.seed
        )
        s = summarize_market(w, out, cluster)
        met, value, wall = int(s["met_deadlines"]), float(s["total_value"]), s["wall_s"]
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
        sched = schedule(w, cluster, run.scheduler)
        wall = time.perf_counter() - t0
        met_mask = sched.end <= w.deadline
        met = int(met_mask.sum())
        done_by_deadline = baseline_work_at_deadline(w, sched.start)
        value = float(
            sum(
                utility(
                    names[k],
                    budget=float(w.budget[k]),
                    t_exec=float(sched.end[k] - w.submit[k]),
                    t_deadline=float(w.deadline[k] - w.submit[k]),
                    t_ideal=float(w.run[k]),
                    work_done=float(done_by_deadline[k]),
                    work_total=1.0,
                )
                for k in range(n)
            )
        )
        row["avg_wait_s"] = float((sched.start - w.submit).mean()) if n else 0.0
    row["met_deadlines"] = met
    row["met_deadlines_pct"] = 100.0 * met / n if n else 0.0
    row["total_value"] = value
    row["_wall_s"] = wall
    return row


@dataclass(frozen=True)
class Experiment:
    """A named sweep: its runs, how one run executes, how rows become derived figures, and
    its figure.

    ``runs(seeds, jobs, factors)`` lists picklable run descriptions; ``execute(run)`` (a
    module-level function, so that a process pool or Dask can ship it) returns one row, a
    JSON-ready dict with ``label``, ``seed`` and, for sweeps over load, ``interarrival_factor``;
    keys starting with ``_`` (e.g. ``_wall_s``) are kept out of ``results.json``.
    """

    name: str
    title: str
    claim: str
    runs: Callable[[int, int | None, Sequence[float]], Sequence[Any]]
    derive: Callable[[list[dict[str, Any]]], dict[str, Any]]
    plot: Callable[[dict[str, Any], Path], None]
    parameters: dict[str, Any] = field(default_factory=dict)
    execute: Callable[[Any], dict[str, Any]] = execute
    sweeps_load: bool = True  # runs over --factors and --jobs (trace experiments)


def register(experiment: Experiment) -> Experiment:
    """Add ``experiment`` to :data:`EXPERIMENTS` (a name may be registered once)."""
    if experiment.name in EXPERIMENTS:
        raise ValueError(f"experiment {experiment.name!r} is already registered")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def _mean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def _efficiency(
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


# --- themis-fig5 -------------------------------------------------------------------------


def _fig5_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    return [
        Run(label=s, scheduler=s, factor=f, seed=k, hosts=240, cores_per_host=1, jobs=jobs or 1000)
        for f in factors
        for k in range(seeds)
        for s in ("market", "fcfs", "edf")
    ]


def _fig5_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    mean = _mean_rows(rows)
    return {
        "rows": mean,
        "efficiency": _efficiency(mean, "market", {"vs_fcfs": "fcfs", "vs_edf": "edf"}),
    }


def _fig5_plot(doc: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
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


# --- slo-fig2 / slo-fig3 -------------------------------------------------------------------

SLO_CLUSTER = {"hosts": 120, "cores_per_host": 2, "memory_per_host": 2048.0}


def _slo2_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "jobs": jobs or 1000}
    runs: list[Run] = []
    for f in factors:
        for k in range(seeds):
            runs += [
                Run("market (CPU; memory plentiful)", "market", f, k, **base),
                Run(
                    "market (CPU+memory; 2 GB/node)", "market", f, k, memory_per_host=2048.0, **base
                ),
                Run("fcfs (2 GB/node)", "fcfs", f, k, memory_per_host=2048.0, **base),
                Run("edf (2 GB/node)", "edf", f, k, memory_per_host=2048.0, **base),
                Run(
                    "market, random policies",
                    "market",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    **base,
                ),
                Run(
                    "fcfs, random policies",
                    "fcfs",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    **base,
                ),
                Run(
                    "edf, random policies",
                    "edf",
                    f,
                    k,
                    memory_per_host=2048.0,
                    random_policies=True,
                    **base,
                ),
            ]
    return runs


def _slo2_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    mean = _mean_rows(rows)
    return {
        "rows": mean,
        "efficiency": _efficiency(
            mean,
            "market (CPU+memory; 2 GB/node)",
            {"vs_fcfs": "fcfs (2 GB/node)", "vs_edf": "edf (2 GB/node)"},
        ),
    }


def _series_plot(ax: Any, rows: list[dict[str, Any]], labels: Sequence[str], key: str) -> None:
    styles = ("o-", "s--", "^:", "d-.", "v-", "x--", "+:")
    for label, style in zip(labels, styles, strict=False):
        pts = [
            (r["interarrival_factor"], r[key]) for r in rows if r["scheduler"] == label and key in r
        ]
        if pts:
            ax.plot(*zip(*pts, strict=True), style, label=label)
    ax.legend(fontsize=7)


def _slo2_plot(doc: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    _series_plot(
        a,
        doc["rows"],
        [
            "market (CPU; memory plentiful)",
            "market (CPU+memory; 2 GB/node)",
            "fcfs (2 GB/node)",
            "edf (2 GB/node)",
        ],
        "total_value",
    )
    a.set(
        xlabel="inter-arrival factor", ylabel="total user satisfaction", title="(a) deadline-strict"
    )
    _series_plot(
        b,
        doc["rows"],
        ["market, random policies", "fcfs, random policies", "edf, random policies"],
        "total_value",
    )
    b.set(
        xlabel="inter-arrival factor",
        ylabel="total user satisfaction",
        title="(b) the four policies at random",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _slo3_runs(seeds: int, jobs: int | None, factors: Sequence[float]) -> list[Run]:
    base: dict[str, Any] = {"hosts": 120, "cores_per_host": 2, "jobs": jobs or 1000}
    return [
        r
        for f in factors
        for k in range(seeds)
        for r in (
            Run("CPU", "market", f, k, **base),
            Run("CPU+memory", "market", f, k, memory_per_host=2048.0, **base),
        )
    ]


def _slo3_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rows": _mean_rows(rows)}


def _slo3_plot(doc: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, title in zip(
        axes,
        ("migrations_per_hour", "suspend_resume_per_hour", "apps_suspended"),
        ("(a) migrations per hour", "(b) suspend/resume per hour", "(c) applications suspended"),
        strict=True,
    ):
        _series_plot(ax, doc["rows"], ["CPU", "CPU+memory"], key)
        ax.set(xlabel="inter-arrival factor", title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


COMMON = {
    "trace": HPC2N,
    "skip": 0,
    "jobs": 1000,
    "period_s": 300.0,
    "deadline_factor": [1.2, 10.0],
    "budget_base": 60.0,
    "budget_renewal": 20.0,
    "budget": "B = B_base / deadline factor per core per period; initial B·procs, "
    "renewed at B·procs·20/60 per period, capped at the initial budget",
}

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
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
                "policy": "deadline-strict",
                "schedulers": ["market", "fcfs", "edf"],
            },
        ),
        Experiment(
            "slo-fig2",
            "SLO paper Fig. 2: total user satisfaction",
            "(a) With CPU and memory allocated the market outperforms FCFS much more than "
            "with CPU only, and loses to EDF increasingly with load; (b) with the four "
            "policies drawn at random the satisfaction degrades.",
            _slo2_runs,
            _slo2_derive,
            _slo2_plot,
            {
                **COMMON,
                "cluster": "120 nodes x 2 cores, 2 GB each (or memory plentiful)",
                "memory": "from the trace, else U[10 %, 90 %] of 2 GB",
            },
        ),
        Experiment(
            "slo-fig3",
            "SLO paper Fig. 3: VM operations",
            "VM operations decrease when the system is highly loaded, and are significantly "
            "higher with CPU and memory than with CPU only.",
            _slo3_runs,
            _slo3_derive,
            _slo3_plot,
            {**COMMON, "cluster": "120 nodes x 2 cores, 2 GB each", "policy": "deadline-strict"},
        ),
    )
}


def run_experiment(
    name: str,
    out: Path,
    *,
    seeds: int = 1,
    workers: int = 1,
    jobs: int | None = None,
    factors: Sequence[float] = FACTORS,
    dask: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run experiment ``name`` and write its files in ``out``; return ``results.json``'s data.

    ``jobs`` shortens the trace window (for quick checks), ``factors`` the sweep. ``dask`` is
    a Dask scheduler address: the runs go there instead of a local process pool.
    """
    if name not in EXPERIMENTS:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(sorted(EXPERIMENTS))}")
    exp = EXPERIMENTS[name]
    runs = exp.runs(seeds, jobs, factors)
    rows = _execute_all(exp.execute, runs, workers, dask, progress)
    derived = exp.derive([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    params = {**exp.parameters, "seeds": seeds}
    if exp.sweeps_load:
        params["jobs"] = jobs or exp.parameters.get("jobs")
        params["interarrival_factors"] = list(factors)
    doc = {
        "experiment": name,
        "title": exp.title,
        "paper_claim": exp.claim,
        "parameters": params,
        **derived,
        "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    (out / "results.md").write_text(markdown(doc))
    exp.plot(doc, out / f"{name}.png")
    timing = {
        "workers": workers,
        "runs": [
            {
                "label": r.get("label"),
                "interarrival_factor": r.get("interarrival_factor"),
                "seed": r.get("seed"),
                "wall_s": round(r.get("_wall_s", 0.0), 3),
            }
            for r in rows
        ],
    }
    (out / "timing.json").write_text(json.dumps(timing, indent=2) + "\n")
    return doc


def _execute_all(
    fn: Callable[[Any], dict[str, Any]],
    runs: Sequence[Any],
    workers: int,
    dask: str | None,
    progress: Callable[[int, int], None] | None,
) -> list[dict[str, Any]]:
    if dask:
        try:
            from dask.distributed import Client
        except ImportError as exc:
            raise RuntimeError("--dask needs dask.distributed: pip install 'merkat[dask]'") from exc
        with Client(dask) as client:  # type: ignore[no-untyped-call]
            futures = client.map(fn, runs, pure=False)
            rows = client.gather(futures)
        if progress:
            progress(len(runs), len(runs))
        return list(rows)
    if workers <= 1:
        rows = []
        for k, run in enumerate(runs):
            rows.append(fn(run))
            if progress:
                progress(k + 1, len(runs))
        return rows
    # Longest runs (market) first so that the pool's tail is short; results in input order.
    order = sorted(range(len(runs)), key=lambda k: _cost_rank(runs[k]))
    results: dict[int, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(fn, runs[k]): k for k in order}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, len(runs))
    return [results[k] for k in range(len(runs))]


def _cost_rank(run: Any) -> tuple[bool, float]:
    """Longest runs first, so that the pool's workers finish together: market runs before
    baselines, and among them the mid-load factors (about 0.3-0.4 on HPC2N: many VMs bid and
    the load balancer works every period) before the extremes."""
    factor = getattr(run, "factor", 0.35)
    return getattr(run, "scheduler", "") != "market", abs(factor - 0.35)


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


import merkat.sim.experiments_gridcloud  # noqa: E402  (registers issue 16's experiments)
import merkat.sim.experiments_merkat  # noqa: E402  (registers issue 6's experiments)
import merkat.sim.experiments_tycoon  # noqa: E402, F401  (registers issue 15's)
