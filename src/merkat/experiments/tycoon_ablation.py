"""Issue 29, disagreement 3 (Tycoon §5): the readings the paper leaves open, one option each.

- ``tycoon-ar6-ablation`` — §5.4's check (AR(6) fitted on 20 h, one-hour forecasts checked on
  the next 20 h, against "the price stays") on each **price series** (the simulated Tycoon
  market of ``tycoon-ar6``; a live merkat run's exported prices; synthetic series with the
  paper's stated properties: job steps with sharp drops, a daily cycle with mean-reverting
  noise, both), each **sampling** of "one hour" (the hour's mean, or the price at the hour's
  end: a snapshot), with and without the **smoothing** (a cubic smoothing spline, GCV); ε as
  §5.4 (:func:`merkat.predict.ar.epsilon`). (The paper's raw autocorrelation, the fit's own
  reading, is ``tycoon-ar6``'s third row.)
- ``tycoon-funding-ablation`` — Table 1's users' nodes and cost per hour under each reading of
  the **funding rule**: the horizon the budget is spent over (Table 1 states no deadline),
  capped Best Response, a stale or a bounded Service Location Service.

The synthetic series' parameters are ours (the paper gives none); they are in
``results.json`` → ``parameters``. Each run is a module-level function of a frozen run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from merkat import seeds
from merkat.experiments.common import pyplot, save_figure
from merkat.experiments.registry import EXPERIMENTS, Experiment
from merkat.experiments.tycoon import HOUR, funding_config, funding_jobs
from merkat.experiments.tycoon_ar6 import AR6, price_history
from merkat.predict import ar
from merkat.worlds.tycoon.simulator import TycoonConfig, TycoonJob, TycoonSim, simulate

LIVE_FILE = "merkat-demo-prices.csv"
SERIES = ("market", "live", "steps", "daily", "daily+steps")
SAMPLINGS = ("hourly-mean", "hourly-snapshot")
ESTIMATORS = ("ar_smoothed", "ar_unsmoothed", "naive")
SYNTH: dict[str, Any] = {
    "hosts": 10,
    "hours": 40,
    "interval_s": 10,
    "level": 1.0,
    "daily_amplitude": 0.25,
    "noise": "AR(1) around the level: sd 0.1, correlation time 1 h",
    "noise_sd": 0.1,
    "noise_tau_h": 1.0,
    "steps": "batch jobs: Poisson arrivals every 2 h on average, each raising the price by "
    "U(0.1, 0.3) for Exp(2 h), then a sharp drop",
    "job_gap_h": 2.0,
    "job_height": [0.1, 0.3],
    "job_duration_h": 2.0,
    "floor": 0.05,
}
AR_ABLATION: dict[str, Any] = {
    "series": {
        "market": "tycoon-ar6's simulated Tycoon market (30 hosts)",
        "live": f"a live merkat run's prices (`merkat demo --duration 300 --period 1`, exported "
        f"with `merkat prices --since 1h -o csv`: merkat/data/prices/{LIVE_FILE}); one hour "
        "= 1/40 of it (7 one-second periods), one series, no seeds",
        "steps": "synthetic (10 hosts a seed): job steps only (sharp drops), no cycle, no noise",
        "daily": "synthetic: a daily cycle plus mean-reverting noise, no job steps",
        "daily+steps": "synthetic: the daily cycle, the noise and the job steps",
    },
    "samplings": {"hourly-mean": "each hour's mean price (tycoon-ar6's reading)",
                  "hourly-snapshot": "the price at the end of each hour"},
    "fit_points": AR6["fit_h"],
    "order": AR6["order"],
    "smoothing": "cubic smoothing spline on each past window, parameter by GCV",
    "synthetic": SYNTH,
}


@dataclass(frozen=True)
class SeriesRun:
    label: str  # the series
    seed: int


def _ar_runs(n: int, jobs: int | None, factors: Sequence[float]) -> list[SeriesRun]:
    return [SeriesRun(s, k) for s in SERIES for k in range(n) if s != "live" or k == 0]


def synthetic(seed: int, kind: str, hosts: int = SYNTH["hosts"]) -> np.ndarray:
    """``hosts`` columns of per-interval prices of the synthetic ``kind`` (``steps``,
    ``daily`` or ``daily+steps``), from the seed's ``synthetic/<kind>`` stream (host j's
    column does not depend on ``hosts``)."""
    from scipy.signal import lfilter

    rng = seeds.stream(seed, f"synthetic/{kind}")
    dt, n_hosts = SYNTH["interval_s"], hosts
    n = int(SYNTH["hours"] * HOUR / dt)
    t = np.arange(n) * dt
    out = np.empty((n, n_hosts))
    for j in range(n_hosts):
        x = np.full(n, SYNTH["level"])
        if "daily" in kind:
            x += SYNTH["daily_amplitude"] * np.sin(2 * np.pi * t / (24 * HOUR)
                                                   + rng.uniform(0, 2 * np.pi))
            rho = np.exp(-dt / (SYNTH["noise_tau_h"] * HOUR))
            e = rng.standard_normal(n) * SYNTH["noise_sd"] * np.sqrt(1 - rho**2)
            e[0] = rng.standard_normal() * SYNTH["noise_sd"]
            x += lfilter([1.0], [1.0, -rho], e)
        if "steps" in kind:
            start = rng.exponential(SYNTH["job_gap_h"] * HOUR)
            while start < t[-1]:
                end = start + rng.exponential(SYNTH["job_duration_h"] * HOUR)
                lo, hi = np.searchsorted(t, (start, end))  # start <= t < end
                x[lo:hi] += rng.uniform(*SYNTH["job_height"])
                start += rng.exponential(SYNTH["job_gap_h"] * HOUR)
        out[:, j] = np.maximum(x, SYNTH["floor"])
    return out


def live_prices() -> np.ndarray:
    """The recorded live run's CPU prices (one column), per period."""
    from merkat.worlds.tycoon.background import read_price_export

    path = Path(__file__).resolve().parents[1] / "data" / "prices" / LIVE_FILE
    return read_price_export(path).cpu.reshape(-1, 1)


def _sampled(x: np.ndarray, per: int, sampling: str) -> np.ndarray:
    n = x.size // per
    if sampling == "hourly-mean":
        return np.asarray(x[: n * per].reshape(n, per).mean(axis=1))
    return np.asarray(x[per - 1 : n * per : per])


def score(x: np.ndarray, per: int, sampling: str, fit: int) -> dict[str, float] | None:
    """ε of each estimator on one host's per-interval prices ``x``, "one hour" = ``per``
    intervals sampled by ``sampling``; None for a host whose fitting window never moves."""
    s = _sampled(x, per, sampling)
    if np.ptp(s[:fit]) == 0:
        return None
    order = AR_ABLATION["order"]
    sm = ar.backtest(s, fit, order, 1, smoothing=True, stationary=True)
    plain = ar.backtest(s, fit, order, 1, stationary=True)
    return {"ar_smoothed": float(sm["epsilon_ar"]),  # type: ignore[arg-type]
            "ar_unsmoothed": float(plain["epsilon_ar"]),  # type: ignore[arg-type]
            "naive": float(sm["epsilon_naive"])}  # type: ignore[arg-type]


def tycoon_ar6_ablation(run: SeriesRun) -> dict[str, Any]:
    if run.label == "market":
        prices, per = price_history(run.seed), int(HOUR / AR6["interval_s"])
    elif run.label == "live":
        prices = live_prices()
        per = prices.shape[0] // (2 * AR_ABLATION["fit_points"])
    else:
        prices, per = synthetic(run.seed, run.label), int(HOUR / SYNTH["interval_s"])
    row: dict[str, Any] = {"label": run.label, "seed": run.seed, "series": run.label}
    for sampling in SAMPLINGS:
        hosts = [score(prices[:, j], per, sampling, AR_ABLATION["fit_points"])
                 for j in range(prices.shape[1])]
        used = [h for h in hosts if h is not None]
        row[sampling] = {k: float(np.mean([h[k] for h in used])) for k in ESTIMATORS} | {
            "hosts": len(used),
            "ar_wins": sum(h["ar_smoothed"] < h["naive"] for h in used)}
    return row


def _spread(vals: list[float]) -> str:
    m = 100 * float(np.mean(vals))
    if len(vals) == 1:
        return f"{m:.2f}"
    return f"{m:.2f} [{100 * min(vals):.2f}-{100 * max(vals):.2f}]"


def _ar_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    table: list[dict[str, Any]] = []
    for series in SERIES:
        runs = [r for r in rows if r["series"] == series]
        if not runs:
            continue
        for sampling in SAMPLINGS:
            cells = [r[sampling] for r in runs]
            entry: dict[str, Any] = {"series": series, "sampling": sampling,
                                     "seeds": len(runs)}
            for k in ESTIMATORS:
                vals = [c[k] for c in cells]
                entry[k] = float(np.mean(vals))
                entry[f"{k}_min"], entry[f"{k}_max"] = float(min(vals)), float(max(vals))
                entry[f"{k}_text"] = _spread(vals)
            entry["ar_wins"] = sum(c["ar_wins"] for c in cells)
            entry["host_series"] = sum(c["hosts"] for c in cells)
            entry["reproduces"] = bool(entry["ar_smoothed"] < entry["naive"]
                                       and entry["ar_smoothed"] < entry["ar_unsmoothed"])
            table.append(entry)
    md = [
        "# Tycoon §5.4 AR(6), ablation (issue 29, disagreement 3)",
        "",
        "Paper: smoothed AR(6), one hour ahead, ε = 8.96 %; the price stays: 9.44 % (smoothed "
        "AR wins, by 5 %). ε in %, mean over seeds [min-max]; 'wins': host series where "
        "smoothed AR beats the naive forecast; 'reproduces': smoothed AR beats both the naive "
        "forecast and unsmoothed AR.",
        "",
        "| series | one hour = | AR(6) smoothed | AR(6) not smoothed | the price stays | wins "
        "| reproduces |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in table:
        md.append(f"| {e['series']} | {e['sampling']} | {e['ar_smoothed_text']} | "
                  f"{e['ar_unsmoothed_text']} | {e['naive_text']} | {e['ar_wins']}/{e['host_series']} | "
                  f"{'yes' if e['reproduces'] else 'no'} |")
    md.append("")
    return {"rows": table, "markdown": "\n".join(md)}


def _ar_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(SAMPLINGS), figsize=(12, 4), sharey=True)
    for ax, sampling in zip(axes, SAMPLINGS, strict=True):
        rows = [r for r in doc["rows"] if r["sampling"] == sampling]
        xs = np.arange(len(rows))
        for off, k, name in ((-0.2, "ar_smoothed", "AR(6) smoothed"),
                             (0.2, "naive", "the price stays")):
            mean = np.array([100 * r[k] for r in rows])
            err = np.array([[mean[i] - 100 * r[f"{k}_min"], 100 * r[f"{k}_max"] - mean[i]]
                            for i, r in enumerate(rows)]).T
            ax.bar(xs + off, mean, 0.4, yerr=err, capsize=3, label=name)
        for v, ls in ((8.96, "-"), (9.44, "--")):
            ax.axhline(v, color="grey", lw=0.8, ls=ls)
        ax.set_yscale("log")  # the live run's AR error is 30-50x the others'
        ax.set_xticks(xs, [r["series"] for r in rows], rotation=20)
        ax.set_title(f"one hour = {sampling} (grey: the paper)")
        ax.set_ylabel("ε (%, log scale)")
        ax.legend()
    fig.suptitle("Tycoon §5.4: AR(6) vs 'the price stays' on each price series "
                 "(paper: 8.96 vs 9.44 %)")
    save_figure(fig, path)


# --- tycoon-funding-ablation ----------------------------------------------------------------

READINGS: dict[str, dict[str, Any]] = {
    "day (default)": {},
    "deadline 5.5 h": {"deadline_h": 5.5},
    "deadline 12 h": {"deadline_h": 12.0},
    "capped": {"capped": True},
    "SLS refreshed every 120 s": {"sls_refresh_s": 120.0},
    "SLS returns 10 hosts": {"sls_limit": 10},
    "outside load": {"outside_load": 2.0},
}
FUNDING_ABLATION: dict[str, Any] = {
    "table": 1,
    "readings": {
        "day (default)": "Table 1's budget spent over 24 h (the paper states no deadline)",
        "deadline 5.5 h": "Table 2's deadline used for Table 1 too (the previous default)",
        "deadline 12 h": "half a day",
        "capped": "capped Best Response: the agent knows a VM uses at most one CPU",
        "SLS refreshed every 120 s": "agents see host prices up to 2 min old",
        "SLS returns 10 hosts": "the SLS answers with the 10 best hosts",
        "outside load": "another tenant bids on every host, a fixed U(0, 2) x a user's "
        "per-host bid (budget / horizon / 15; the seed's outside-load stream): unequal prices",
    },
}


@dataclass(frozen=True)
class ReadingRun:
    label: str  # the reading
    seed: int


def _funding_runs(n: int, jobs: int | None, factors: Sequence[float]) -> list[ReadingRun]:
    return [ReadingRun(name, k) for name in READINGS for k in range(n)]


class _OutsideLoad(TycoonSim):
    """Table 1's market with one outside bidder per host, bidding ``load[j]`` on host j for
    the whole run (not charged, like a replayed background: the audit covers the jobs' money)."""

    def __init__(self, config: TycoonConfig, jobs: Sequence[TycoonJob], load: np.ndarray
                 ) -> None:
        super().__init__(config, jobs)
        self.load = load

    def _background_bids(self, now: float) -> np.ndarray:
        return self.load


def tycoon_funding_ablation(run: ReadingRun) -> dict[str, Any]:
    kw = dict(READINGS[run.label])
    deadline = kw.pop("deadline_h", None)
    capped = bool(kw.pop("capped", False))
    outside = kw.pop("outside_load", None)
    cfg = funding_config(capped, run.seed, record_every=0, **kw)
    five = funding_jobs(1, deadline)
    if outside is None:
        res = simulate(cfg, five)
    else:
        per_host = five[0].budget / five[0].deadline_s / five[0].subjobs
        load = seeds.stream(run.seed, "outside-load").uniform(0, outside, cfg.hosts) * per_host
        res = _OutsideLoad(cfg, five, load).run()
    groups = {}
    for users, idx in (("1-2", (0, 1)), ("3-5", (2, 3, 4))):
        jobs = [j for j in res.jobs if j["job"] in idx]
        done = [j for j in jobs if j["complete"]]
        groups[users] = {
            k: (float(np.mean([j[k] for j in done])) if done else None)
            for k in ("time_h", "cost_per_h", "latency_min_per_job")
        } | {"nodes": float(np.mean([j["nodes"] for j in jobs])), "completed": len(done),
             "jobs": len(jobs), "spent": float(np.mean([j["cost"] for j in jobs]))}
    return {"label": run.label, "seed": run.seed, "reading": run.label, "groups": groups,
            "audit_ok": res.audit_ok}


def _funding_derive(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from merkat.experiments.tycoon import PAPER_TABLES

    table = []
    for name in READINGS:
        runs = [r for r in rows if r["reading"] == name]
        for users in ("1-2", "3-5"):
            cells = [r["groups"][users] for r in runs]
            e: dict[str, Any] = {"reading": name, "users": users, "seeds": len(runs)}
            for k in ("time_h", "cost_per_h", "latency_min_per_job", "nodes", "spent"):
                vals = [c[k] for c in cells if c[k] is not None]
                e[k] = float(np.mean(vals)) if vals else None
                e[f"{k}_text"] = ("-" if not vals else f"{np.mean(vals):.2f}" if len(vals) == 1
                                  else f"{np.mean(vals):.2f} [{min(vals):.2f}-{max(vals):.2f}]")
            e["completed"] = sum(c["completed"] for c in cells)
            e["jobs"] = sum(c["jobs"] for c in cells)
            e["paper"] = dict(zip(("time_h", "cost_per_h", "latency_min_per_job", "nodes"),
                                  PAPER_TABLES[1][users], strict=True))
            table.append(e)
    md = [
        "# Tycoon Table 1, the funding rule ablated (issue 29, disagreement 3)",
        "",
        "Mean over seeds [min-max]; paper: users 1-2 7.16 h, 4.19 $/h, 15 nodes; users 3-5 "
        "6.36 h, 4.28 $/h, 8.7 nodes.",
        "",
        "| reading | users | time (h) | cost ($/h) | spent ($ of 100) | nodes | completed |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in table:
        md.append(f"| {e['reading']} | {e['users']} | {e['time_h_text']} | "
                  f"{e['cost_per_h_text']} | {e['spent_text']} | {e['nodes_text']} | "
                  f"{e['completed']}/{e['jobs']} |")
    md += ["", f"Ledger audit in every run: {'ok' if all(r['audit_ok'] for r in rows) else 'FAILED'}.",
           ""]
    return {"rows": table, "audit_ok": all(r["audit_ok"] for r in rows),
            "markdown": "\n".join(md)}


def _funding_plot(doc: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    names = list(READINGS)
    xs = np.arange(len(names))
    for ax, key, title in ((axes[0], "cost_per_h", "cost ($/h)"), (axes[1], "nodes", "nodes")):
        for off, users in ((-0.2, "1-2"), (0.2, "3-5")):
            vals = [next(r[key] or 0 for r in doc["rows"]
                         if r["reading"] == n and r["users"] == users) for n in names]
            ax.bar(xs + off, vals, 0.4, label=f"users {users}")
            paper = doc["rows"][0 if users == "1-2" else 1]["paper"][key]
            ax.axhline(paper, ls="--", lw=0.8, color="C0" if users == "1-2" else "C1")
        ax.set_xticks(xs, names, rotation=20, fontsize=8)
        ax.set_title(f"{title} (dashed: the paper)")
        ax.legend()
    fig.suptitle("Tycoon Table 1 under each reading of the funding rule")
    save_figure(fig, path)


EXPERIMENTS.register(Experiment(
    "tycoon-ar6-ablation", "Tycoon §5.4 AR(6): each price series, sampling and smoothing",
    "AR(6) with a one-hour forecast and smoothing: ε = 8.96 %; the price stays: 9.44 %.",
    _ar_runs, _ar_derive, _ar_plot, dict(AR_ABLATION), tycoon_ar6_ablation,
    sweeps_load=False))
EXPERIMENTS.register(Experiment(
    "tycoon-funding-ablation", "Tycoon Table 1: each reading of the funding rule",
    "Equal funding: users 1-2 7.16 h, 4.19 $/h, 15 nodes; users 3-5 6.36 h, 4.28 $/h, "
    "8.7 nodes (Best Response found it too expensive to fund more).",
    _funding_runs, _funding_derive, _funding_plot, dict(FUNDING_ABLATION),
    tycoon_funding_ablation, sweeps_load=False))
