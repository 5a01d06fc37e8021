"""``merkat sim experiment NAME``: reproduce a paper's experiment (see
:mod:`merkat.experiments`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import err_console, fail
from merkat.cli.sim import app as sim_app
from merkat.cli.validate import check_choice, check_float, check_int

MAX_SEEDS = 1000
"""The most seeds per configuration (each is a run of every scheduler at every factor)."""
MAX_WORKERS = 1024
"""The most worker processes (as ``sim run --workers``)."""


def _factors(text: str | None, default: tuple[float, ...]) -> tuple[float, ...]:
    if text is None:
        return default
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        fail(f"--factors: expected comma-separated numbers, got {text!r}")
    if not values or any(not 0 < v <= 10 for v in values):
        fail(f"--factors: each factor must be in (0, 10], got {text!r}")
    return values


@sim_app.command("experiment")
def experiment(
    name: str = typer.Argument(
        ..., help="Experiment name, e.g. themis-fig5 (an unknown name lists the known ones)."
    ),
    out: Path = typer.Option(..., "--out", help="Directory for results.json, results.md, PNG."),
    seeds: int = typer.Option(
        1, "--seeds", help=f"Seeds per configuration (0..K-1), K in [1, {MAX_SEEDS}]."),
    workers: int = typer.Option(
        1, "--workers", help=f"Processes for the sweep, in [1, {MAX_WORKERS}] (never more than "
        "its runs)."),
    jobs: int | None = typer.Option(
        None, "--jobs", min=1, help="Trace window (default: the paper's, 1,000 jobs); "
        "gridcloud-*: tasks per user. Refused by the experiments that read no number of jobs."
    ),
    factors: str | None = typer.Option(
        None, "--factors", help="Inter-arrival factors, e.g. 0.1,0.5,1 (default 0.1 ... 1.0)."
    ),
    dask: str | None = typer.Option(
        None, "--dask", help="Run the sweep on this Dask scheduler (e.g. tcp://host:8786)."
    ),
    policy: str | None = typer.Option(
        None, "--policy", help="The market's controllers' policy (experiments that take one, "
        "e.g. themis-fig5; default: the paper's)."),
    policy_param: list[str] = typer.Option(
        [], "--policy-param", help="KEY=VALUE, a parameter of the policy (repeatable), e.g. "
        "forecast=ar."),
    balancer: str | None = typer.Option(
        None, "--balancer", help="The market's load balancer (experiments that take a "
        "policy): merkat (default) | themis (Themis Fig. 2)."),
    reading: list[str] = typer.Option(
        [], "--reading", help="KEY=VALUE, a reading of the paper (repeatable; slo-fig2, "
        "slo-fig3): edf=run|kill, value=job|tasks, overheads=paper|none, "
        "suspend=eager|damped (docs/experiments.md)."),
    market: str | None = typer.Option(
        None, "--market", help="Another market mechanism to compare (slo-fig2: drf, the "
        "DRF-aware bundle market, docs/market.md)."),
    period: float | None = typer.Option(
        None, "--period", help="The market's scheduling period, seconds (experiments that take "
        "a policy; default: the paper's)."),
    vm_costs: str | None = typer.Option(
        None, "--vm-costs", help="The VM-operation cost model of the market runs (experiments "
        "that take a policy): none (free) | themis (no boot delay; migrations memory/bandwidth "
        "at 10 % CPU overhead) | slo (themis + 30-s boot and resume)."),
    force: bool = typer.Option(
        False, "--force", help="Replace the results of a previous run in a non-empty --out."
    ),
) -> None:
    """Run a paper's experiment; print where its results are and the headline figures."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from merkat.experiments import EXPERIMENTS, FACTORS, run_experiment

    check_int("--seeds", seeds, 1, MAX_SEEDS)
    check_int("--workers", workers, 1, MAX_WORKERS)
    EXPERIMENTS.get(name)  # an unknown name: exit 2, listing the known experiments
    if factors is not None and not EXPERIMENTS[name].sweeps_load:
        fail(f"--factors: experiment {name!r} does not sweep the load (its loads are part of "
             "the setup)")
    if jobs is not None and not EXPERIMENTS[name].takes_jobs:
        fail(f"--jobs: experiment {name!r} does not take a number of jobs (its workload is "
             "part of the setup)")
    fs = _factors(factors, EXPERIMENTS[name].default_factors or FACTORS)
    params: dict[str, Any] = {}
    if policy is not None or policy_param:
        from merkat.cli.policy import trace_policies
        from merkat.cli.sim_run import parse_policy_params

        if not EXPERIMENTS[name].takes_policy:
            fail(f"--policy: experiment {name!r} does not take a policy (its applications' "
                 "policies are part of the setup)")
        chosen = policy or str(EXPERIMENTS[name].parameters.get("policy"))
        if chosen not in trace_policies():
            fail(f"--policy must be one of {', '.join(trace_policies())}, got {chosen!r}")
        params = parse_policy_params(policy_param, chosen)
    if balancer is not None:
        if not EXPERIMENTS[name].takes_policy:
            fail(f"--balancer: experiment {name!r} does not take a balancer (its market is "
                 "part of the setup)")
        from merkat.market.types import BALANCERS

        check_choice("--balancer", balancer, BALANCERS)
    readings: dict[str, str] = {}
    if reading:
        from merkat.experiments.readings import parse_readings

        if not EXPERIMENTS[name].takes_readings:
            fail(f"--reading: experiment {name!r} takes no readings (slo-fig2 and slo-fig3 do)")
        try:
            readings = parse_readings(reading)
        except ValueError as exc:
            fail(str(exc))
    if market is not None and market not in EXPERIMENTS[name].markets:
        fail(f"--market: experiment {name!r} takes "
             f"{', '.join(EXPERIMENTS[name].markets) or 'no other market'}, got {market!r}")
    for flag, value in (("--period", period), ("--vm-costs", vm_costs)):
        if value is not None and not EXPERIMENTS[name].takes_policy:
            fail(f"{flag}: experiment {name!r} does not take it (its market is part of the "
                 "setup)")
    check_float("--period", period, 1, 86400)  # as sim run's: a shorter one never ends
    from merkat.experiments.common import VM_COSTS

    if vm_costs is not None and vm_costs not in VM_COSTS:
        fail(f"--vm-costs must be one of {', '.join(VM_COSTS)}, got {vm_costs!r}")
    from merkat.outputs import output_dir, prepare_out_dir

    final_out = prepare_out_dir(out, force=force)  # checked before the run, not after
    stderr_console = err_console()
    t0 = time.perf_counter()
    with Progress(
        TextColumn(f"{name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr_console,
        transient=True,
        refresh_per_second=2,  # (its thread shares the cores with the runs: twice a second
        disable=not stderr_console.is_terminal,  # is enough; none in a file or a pipe)
    ) as bar:
        task = bar.add_task(name, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        try:
            with output_dir(final_out, force=force) as tmp:
                run_experiment(
                    name,
                    tmp,
                    seeds=seeds,
                    workers=workers,
                    jobs=jobs,
                    factors=fs,
                    dask=dask,
                    progress=progress,
                    policy=policy,
                    policy_params=params,
                    balancer=balancer,
                    readings=readings,
                    market=market,
                    period=period,
                    vm_costs=vm_costs,
                )
        except FileNotFoundError as exc:
            fail(str(exc))
        except RuntimeError as exc:
            fail(str(exc), code=1)
    wall = time.perf_counter() - t0
    out = final_out
    print((out / "results.md").read_text(), end="")
    stderr_console.print(
        f"wrote {out}/results.json, results.md, {name}.png in {wall:.1f} s",
        markup=False,
        highlight=False,
    )
