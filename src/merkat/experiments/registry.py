"""The experiments registry: ``merkat sim experiment NAME --out DIR [--seeds K] [--workers W]``.

An experiment is a sweep of independent runs (one simulation each), executed on a process
pool (or a Dask cluster), then aggregated into ``results.json`` (parameters, rows, derived
figures), ``results.md`` (a markdown table) and a PNG shaped like the paper's figure.
``timing.json`` holds wall-clock times, kept apart so that the same inputs and seeds give
byte-identical results files.

One registration style: each paper's module (:mod:`~merkat.experiments.themis`,
:mod:`~merkat.experiments.slo`, :mod:`~merkat.experiments.merkat`) calls
``EXPERIMENTS.register(Experiment(...))`` at import (a :class:`merkat.registry.Registry`: a
name is registered once); :mod:`merkat.experiments` imports them all.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from merkat.experiments.common import FACTORS, VM_COSTS, execute, markdown, pyplot
from merkat.market.types import BALANCERS
from merkat.registry import Registry
from merkat.sim.schedulers import is_market


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
    # its runs read --jobs (None: as sweeps_load, a trace window; gridcloud-*: the tasks per
    # user); False: `--jobs` is refused (it was silently ignored)
    takes_jobs: bool | None = None
    takes_policy: bool = False  # its market runs take --policy / --policy-param
    default_factors: tuple[float, ...] | None = None  # --factors' default (None: FACTORS)
    takes_readings: bool = False  # its runs take --reading KEY=VALUE (experiments.readings)
    markets: tuple[str, ...] = ()  # the mechanisms --market may name (besides the default)
    # the runs with --market NAME (given: NAME, seeds, jobs, factors)
    runs_for_market: Callable[[str, int, int | None, Sequence[float]], Sequence[Any]] | None = None


    def __post_init__(self) -> None:
        if self.takes_jobs is None:
            object.__setattr__(self, "takes_jobs", self.sweeps_load)


EXPERIMENTS: Registry[Experiment] = Registry("experiment")
"""Every registered experiment, by name."""


def run_experiment(
    name: str,
    out: Path,
    *,
    seeds: int = 1,
    workers: int = 1,
    jobs: int | None = None,
    factors: Sequence[float] | None = None,
    dask: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    policy: str | None = None,
    policy_params: Mapping[str, Any] | None = None,
    balancer: str | None = None,
    readings: Mapping[str, str] | None = None,
    market: str | None = None,
    period: float | None = None,
    vm_costs: str | None = None,
) -> dict[str, Any]:
    """Run experiment ``name`` and write its files in ``out``; return ``results.json``'s data.

    ``jobs`` shortens the trace window (for quick checks), ``factors`` the sweep. ``dask`` is
    a Dask scheduler address: the runs go there instead of a local process pool. ``balancer``
    (``merkat`` | ``themis``, experiments that take a policy) is the market runs' load
    balancer; given, ``results.json``'s parameters record it (absent: the default, merkat).
    ``readings`` (experiments that take them: :mod:`~merkat.experiments.readings`) and
    ``market`` (a mechanism the experiment compares, e.g. ``drf`` for ``slo-fig2``) likewise.
    ``period`` (seconds) and ``vm_costs`` (a key of :data:`~merkat.experiments.common.
    VM_COSTS`) replace the market runs' period and VM-operation costs the same way (the
    ablations of docs/experiments.md).
    """
    exp = EXPERIMENTS.get(name)
    factors = factors if factors is not None else (exp.default_factors or FACTORS)
    runs = exp.runs(seeds, jobs, factors)
    chosen: dict[str, Any] = {}
    if market is not None:
        if market not in exp.markets or exp.runs_for_market is None:
            raise ValueError(f"--market: experiment {name!r} takes "
                             f"{', '.join(exp.markets) or 'no other market'}, got {market!r}")
        runs = exp.runs_for_market(market, seeds, jobs, factors)
        chosen["market"] = market
    if policy is not None or policy_params:
        if not exp.takes_policy:
            raise ValueError(f"experiment {name!r} does not take --policy or --policy-param "
                             "(its applications' policies are part of the setup)")
        given = tuple(sorted((policy_params or {}).items()))
        runs = [replace(r, policy=policy or r.policy, policy_params=given)
                if is_market(getattr(r, "scheduler", "")) else r for r in runs]
        chosen["policy"] = policy or exp.parameters.get("policy")
        if given:
            chosen["policy_params"] = dict(given)
    if balancer is not None:
        if not exp.takes_policy:
            raise ValueError(f"experiment {name!r} does not take --balancer (its market is "
                             "part of the setup)")
        if balancer not in BALANCERS:
            raise ValueError(f"--balancer must be one of {', '.join(BALANCERS)}, "
                             f"got {balancer!r}")
        runs = [replace(r, balancer=balancer) if is_market(getattr(r, "scheduler", "")) else r
                for r in runs]
        chosen["balancer"] = balancer
    if readings:
        from merkat.experiments.readings import apply_readings, check_readings

        if not exp.takes_readings:
            raise ValueError(f"experiment {name!r} does not take --reading")
        chosen["readings"] = check_readings(readings)
        runs = [apply_readings(r, chosen["readings"], is_market(getattr(r, "scheduler", "")))
                for r in runs]
    market_changes: dict[str, Any] = {}
    if period is not None:
        if not period > 0 or period > 86400:
            raise ValueError(f"--period must be in (0, 86400] seconds, got {period!r}")
        market_changes["period"] = float(period)
        chosen["period_s"] = float(period)
    if vm_costs is not None:
        if vm_costs not in VM_COSTS:
            raise ValueError(f"--vm-costs must be one of {', '.join(VM_COSTS)}, "
                             f"got {vm_costs!r}")
        market_changes.update(VM_COSTS[vm_costs])
        chosen["vm_costs"] = {"reading": vm_costs, **VM_COSTS[vm_costs]}
    if market_changes:
        if not exp.takes_policy:
            raise ValueError(f"experiment {name!r} does not take --period or --vm-costs (its "
                             "market is part of the setup)")
        runs = [replace(r, **market_changes) if is_market(getattr(r, "scheduler", "")) else r
                for r in runs]
    rows = _execute_all(exp.execute, runs, workers, dask, progress, meanwhile=pyplot)
    derived = exp.derive([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    params = {**exp.parameters, **chosen, "seeds": seeds}
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


def _default_sigterm() -> None:
    """In a pool worker: SIGTERM stops it (not the command's handler, which unwinds)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _execute_all(
    fn: Callable[[Any], dict[str, Any]],
    runs: Sequence[Any],
    workers: int,
    dask: str | None,
    progress: Callable[[int, int], None] | None,
    meanwhile: Callable[[], Any] | None = None,
) -> list[dict[str, Any]]:
    """Every run's row, in ``runs`` order: on a Dask cluster, on a pool of ``workers``
    processes, or here. With workers elsewhere, this process (otherwise idle until the last
    row) calls ``meanwhile`` on a thread once they are started: the figure's plotting
    library is imported while the runs go on, not after them (~1.3 s of CPU)."""
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
    # never more processes than runs: a pool forks all its workers at the first submit
    pool = ProcessPoolExecutor(max_workers=min(workers, len(runs)),
                               initializer=_default_sigterm)
    try:
        futures = {pool.submit(fn, runs[k]): k for k in order}  # (every worker forked here)
        if meanwhile is not None:
            threading.Thread(target=_quietly, args=(meanwhile,), daemon=True).start()
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, len(runs))
    except BaseException:  # Ctrl-C, SIGTERM, a failed run: stop the workers now
        workers_left = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in workers_left:
            p.kill()
        raise
    pool.shutdown()
    return [results[k] for k in range(len(runs))]


def _quietly(fn: Callable[[], Any]) -> None:
    """``fn()``, its failure ignored (the caller does the same work again when it needs it,
    and then sees the error)."""
    with contextlib.suppress(Exception):
        fn()


def _cost_rank(run: Any) -> tuple[bool, float]:
    """Longest runs first, so that the pool's workers finish together: market runs before
    baselines, and among them the mid-load factors (about 0.3-0.4 on HPC2N: many VMs bid and
    the load balancer works every period) before the extremes."""
    factor = getattr(run, "factor", 0.35)
    return not is_market(getattr(run, "scheduler", "")), abs(factor - 0.35)
