"""``merkat sim ...``: replay SWF traces under batch schedulers, compare and plot runs, generate
Lublin-model workloads; and ``merkat bench sim``.

Bad input (flags, trace lines) gives a one-line ``error: ...`` naming the flag or ``file:line``
and exit code 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from merkat.cli import bench
from merkat.cli._common import (
    LazyProgress,
    OutputFormat,
    OutputOption,
    emit,
    err_console,
    fail,
    print_json,
    print_table,
)
from merkat.cli.validate import check_float, check_int
from merkat.sim.schedulers import (  # light: each entry imports its engine when run
    OUTCOMES,
    SCHEDULERS,
)
from merkat.sim.workload.traces import HPC2N_NAME, find_trace

app = typer.Typer(
    help="Trace-driven simulator: batch baselines (FCFS, EDF, EASY) on SWF workloads.",
    no_args_is_help=True,
)



def _check(cond: bool, message: str) -> None:
    if not cond:
        fail(message)


def _param_value(text: str) -> Any:
    """A --policy-param value: an int, a float, true/false, or the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_policy_params(items: list[str], policy: str | None) -> dict[str, Any]:
    """``--policy-param KEY=VALUE`` flags as keyword arguments of ``policy`` (checked by
    building one controller: an unknown key or a bad value is a one-line error, exit 2)."""
    if items and policy is None:
        fail("--policy-param: only with --scheduler market")
    params: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            fail(f"--policy-param: expected KEY=VALUE, got {item!r}")
        params[key.strip()] = _param_value(value)
    if params and policy is not None:
        from merkat.control.registry import PolicyError, make_policy

        try:
            make_policy(policy, **params)
        except PolicyError as exc:
            fail(f"--policy-param: {exc}")
    return params


@app.command("run")
def run_cmd(
    trace: str = typer.Option(
        ..., "--trace", help="A trace name (`merkat traces list`) or an SWF file (.swf, .swf.gz)."
    ),
    scheduler: str = typer.Option(
        ..., "--scheduler", help=" | ".join(SCHEDULERS) + " (merkat.sim.schedulers)"
    ),
    out: Path = typer.Option(..., "--out", help="Directory for jobs.csv and summary.json."),
    jobs: int | None = typer.Option(None, "--jobs", help="Simulate at most N jobs."),
    skip: int = typer.Option(0, "--skip", help="Skip the first N job records of the trace."),
    hosts: int | None = typer.Option(None, "--hosts", help="Number of hosts."),
    cores_per_host: int | None = typer.Option(None, "--cores-per-host", help="Cores per host."),
    memory_per_host: float | None = typer.Option(
        None, "--memory-per-host", help="Memory per host, MiB (default: unconstrained)."
    ),
    interarrival_factor: float = typer.Option(
        1.0, "--interarrival-factor", help="Multiply inter-arrival times (0.1 = heavy load)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the run: the jobs' SLO attributes and the controllers' draws."),
    strict: bool = typer.Option(False, "--strict", help="Fail on the first bad trace line."),
    deadline_min: float = typer.Option(1.2, "--deadline-factor-min"),
    deadline_max: float = typer.Option(10.0, "--deadline-factor-max"),
    budget_base: float = typer.Option(
        60.0, "--budget-base", help="B_base (budget = B_base/factor)."
    ),
    policy: str | None = typer.Option(
        None, "--policy", help="With --scheduler market: the controllers' policy "
        "(default deadline-strict)."
    ),
    market: str = typer.Option(
        "proportional-share", "--market",
        help="With --scheduler market: the market mechanism — proportional-share (Merkat), "
             "tycoon (an auction per host) or posted (grid-cloud posted prices, eq. 5).",
    ),
    policy_param: list[str] = typer.Option(
        [], "--policy-param",
        help="With --scheduler market: KEY=VALUE, a parameter of the policy (repeatable; "
             "`merkat policy list` shows them), e.g. forecast=ar.",
    ),
    period: float | None = typer.Option(
        None, "--period", help="With --scheduler market: the scheduling period, seconds "
        "(default 300)."
    ),
    admission: float | None = typer.Option(
        None, "--admission", metavar="SECONDS",
        help="With --scheduler market: the applications manager admits new applications "
        "between periods every SECONDS (Merkat §4.2.2: 10, the default); 0 makes them wait "
        "for the next period.",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="With --scheduler market: cut the trace where the cluster is empty "
        "and run the pieces on this many processes (same results; default 1).",
    ),
    economy: str | None = typer.Option(
        None, "--economy", help="With --scheduler market: themis (users receive a per-period "
        "allowance) | closed (no money enters after the initial budgets; the Virtual Bank "
        "returns the provider's income to the users; default themis).",
    ),
    charging: str | None = typer.Option(
        None, "--charging", help="With --scheduler market: bid (VMs pay their bids, the "
        "default) | use (VMs pay what they use, the rest of the deposit refunded).",
    ),
    balancer: str | None = typer.Option(
        None, "--balancer", help="With --scheduler market: the load balancer — merkat (the VM "
        "with the largest allocation error moves to the node minimising it, the default) | "
        "themis (Themis Fig. 2: the least valuable VM of the most overloaded node moves to the "
        "least loaded; stop after 10 non-improving iterations).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace the results of a previous run in a non-empty --out."
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Replay a trace under one scheduler; write DIR/jobs.csv and DIR/summary.json.

    The files appear together when the run ends (written in a temporary directory that then
    replaces DIR); a non-empty DIR is refused before the run unless --force.

    Without --hosts/--cores-per-host the machine is the trace header's MaxProcs as one pool.
    """
    from merkat.sim.run import RunOptions, run_trace
    from merkat.sim.workload.jobs import SloConfig
    from merkat.sim.workload.swf import SwfError

    _check(
        scheduler in SCHEDULERS,
        f"--scheduler must be one of {', '.join(SCHEDULERS)}, got {scheduler!r}",
    )
    if not SCHEDULERS[scheduler].market:  # the market's options mean nothing to a batch run
        given = {"--policy": policy, "--period": period, "--admission": admission,
                 "--workers": workers, "--economy": economy, "--charging": charging,
                 "--balancer": balancer}
        for flag, value in given.items():
            _check(value is None, f"{flag}: only with --scheduler market (the {scheduler} "
                   "scheduler has no controllers, periods or money)")
    policy = "deadline-strict" if policy is None else policy
    period = 300.0 if period is None else period
    admission = 10.0 if admission is None else admission
    workers = 1 if workers is None else workers
    economy = "themis" if economy is None else economy
    charging = "bid" if charging is None else charging
    balancer = "merkat" if balancer is None else balancer
    _check(jobs is None or jobs >= 1, f"--jobs must be >= 1, got {jobs}")
    _check(skip >= 0, f"--skip must be >= 0, got {skip}")
    check_int("--hosts", hosts, 1, 1_000_000)
    check_int("--cores-per-host", cores_per_host, 1, 1_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    check_float("--memory-per-host", memory_per_host, 0, 1e12, lo_open=True)
    _check((hosts is None) == (cores_per_host is None), "--hosts and --cores-per-host go together")
    check_float("--interarrival-factor", interarrival_factor, 0, 1000, lo_open=True)
    check_float("--deadline-factor-min", deadline_min, 0, 1000, lo_open=True)
    check_float("--deadline-factor-max", deadline_max, 0, 1000, lo_open=True)
    _check(deadline_min <= deadline_max, "--deadline-factor-min/max must satisfy min <= max")
    check_float("--budget-base", budget_base, 0, 1e9, lo_open=True)
    check_float("--period", period, 1, 86400)
    check_float("--admission", admission, 0, 86400)
    check_int("--workers", workers, 1, 1024)
    _check(economy in ("themis", "closed"), f"--economy must be themis or closed, got {economy!r}")
    _check(charging in ("bid", "use"), f"--charging must be bid or use, got {charging!r}")
    _check(balancer in ("merkat", "themis"),
           f"--balancer must be merkat or themis, got {balancer!r}")
    try:
        trace_path = find_trace(trace)
    except FileNotFoundError as e:
        fail(f"--trace: {e}")
    from merkat.outputs import output_dir, prepare_out_dir

    prepare_out_dir(out, force=force)  # before the run, not after it
    takes_market = SCHEDULERS[scheduler].market  # the market's options apply
    if takes_market:
        from merkat.cli.policy import trace_policies
        from merkat.control.registry import POLICIES

        _check(
            policy in POLICIES,
            f"--policy must be one of {', '.join(sorted(POLICIES))}, got {policy!r}",
        )
        usable = trace_policies()
        _check(
            policy in usable,
            f"--policy {policy}: not usable on the rigid jobs of a trace (it drives "
            f"{', '.join(POLICIES[policy].applies_to)} applications); use one of: "
            f"{', '.join(usable)} (merkat policy list)",
        )
    params = parse_policy_params(policy_param, policy if takes_market else None)
    if market != "proportional-share":
        from merkat.market.mechanisms import MECHANISMS

        _check(takes_market, "--market: only with --scheduler market")
        _check(market in MECHANISMS, f"--market must be one of {', '.join(sorted(MECHANISMS))}, "
               f"got {market!r}")
        _check(balancer == "merkat", f"--balancer {balancer}: only with --market "
               "proportional-share (the other mechanisms place no VMs to balance)")
    opts = RunOptions(
        trace=trace_path,
        scheduler=scheduler,
        out=out,
        jobs=jobs,
        skip=skip,
        hosts=hosts,
        cores_per_host=cores_per_host,
        memory_per_host=memory_per_host,
        interarrival_factor=interarrival_factor,
        seed=seed,
        strict=strict,
        slo=SloConfig(deadline_min, deadline_max, budget_base),
        policy=policy,
        period=period,
        workers=workers,
        economy=economy,
        charging=charging,
        policy_params=params,
        market=market,
        admission=admission or None,
        balancer=balancer,
    )
    bars: list[LazyProgress] = []
    t0 = time.perf_counter()

    def factory(total: int) -> Callable[[int], None]:
        bars.append(LazyProgress(total, f"simulating ({scheduler})", t0))
        return bars[-1]

    try:
        with output_dir(out, force=force) as tmp:
            summary = run_trace(dataclasses.replace(opts, out=tmp), factory)
    except (SwfError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"--out: cannot write to {out}: {e.strerror or e}")
    finally:
        for b in bars:
            b.close()
    if summary["skipped_lines"]:
        first = summary["bad_lines"][0] if summary["bad_lines"] else ""
        err_console().print(
            f"warning: skipped {summary['skipped_lines']} bad trace line(s); first: {first}",
            markup=False,
            highlight=False,
        )
    emit(output, summary, lambda: _summary_table([(str(out), summary)]))


_COMPARE_KEYS = (
    ("scheduler", "scheduler"),
    ("jobs", "jobs"),
    ("dropped", "dropped (trace records not simulated)"),
    ("finished", "finished by the deadline"),
    ("late", "finished late"),
    ("stopped-deadline", "stopped at the deadline"),
    ("stopped-budget", "stopped: out of budget"),
    ("never-started", "never started"),
    ("avg_wait_s", "avg_wait_s"),
    ("avg_bounded_slowdown", "avg_bounded_slowdown"),
    ("utilization", "utilization"),
    ("makespan_s", "makespan_s"),
    ("met_deadlines", "met_deadlines"),
    ("total_value", "total_value"),
    ("wall_s", "wall_s (the whole command)"),
    ("simulate_s", "simulate_s (the scheduling loop)"),
    ("jobs_per_s", "jobs_per_s (jobs / simulate_s: speed)"),
)
"""Rows of ``sim compare``'s table: summary key (or outcome), label."""


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    return v


def run_label(summary: dict[str, Any]) -> str:
    """What ran: a batch scheduler by name; a market run by its mechanism and policy
    (``market proportional-share/deadline-strict``)."""
    name = str(summary.get("scheduler", "?"))
    if "policy" in summary or "market" in summary:
        return f"{name} {summary.get('market', 'proportional-share')}/{summary.get('policy', '?')}"
    return name


def outcome_counts(summary: dict[str, Any]) -> dict[str, int | None]:
    """How each simulated job ended: a market run's ``outcomes``; a batch run runs every job
    to its end, on time (met) or late."""
    found = summary.get("outcomes")
    if isinstance(found, dict):
        return {o: found.get(o, 0) for o in OUTCOMES}
    jobs, met = summary.get("jobs"), summary.get("met_deadlines")
    if not isinstance(jobs, int) or not isinstance(met, int):
        return dict.fromkeys(OUTCOMES)
    if "policy" in summary:  # a market run written before outcomes were recorded
        return {"finished": met, "late": None, "stopped-deadline": None,
                "stopped-budget": None, "never-started": jobs - int(summary.get("started", jobs))}
    return {"finished": met, "late": jobs - met, "stopped-deadline": 0, "stopped-budget": 0,
            "never-started": 0}


def _summary_table(runs: list[tuple[str, dict[str, Any]]]) -> None:
    rows = []
    for key, label in _COMPARE_KEYS:
        cells: list[Any] = []
        for _, s in runs:
            if key == "scheduler":
                cells.append(run_label(s))
            elif key in OUTCOMES:
                cells.append(outcome_counts(s)[key])
            else:
                cells.append(_cell(s.get(key)))
        rows.append([label, *cells])
    print_table(None, ["metric", *[name for name, _ in runs]], rows)


@app.command("compare")
def compare_cmd(
    dirs: list[Path] = typer.Argument(..., help="Run directories (each with summary.json)."),
    output: OutputFormat = OutputOption,
) -> None:
    """Print the summaries of several runs side by side."""
    runs: list[tuple[str, dict[str, Any]]] = []
    for d in dirs:
        path = d / "summary.json"
        if not path.is_file():
            fail(f"{d}: no summary.json (not a run directory)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            fail(f"{path}:{e.lineno}: invalid JSON: {e.msg}")
        except UnicodeDecodeError as e:
            fail(f"{path}: not UTF-8 text (byte {e.start})")
        if not isinstance(data, dict):
            fail(f"{path}: not a run summary (a JSON object)")
        runs.append((str(d), data))
    emit(output, {name: s for name, s in runs}, lambda: _summary_table(runs))


@app.command("plot")
def plot_cmd(
    run_dir: Path = typer.Argument(..., help="Run directory (jobs.csv + summary.json)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write PNGs (default: DIR)."),
) -> None:
    """Write queue_length.png, utilization.png and wait_times.png for a run."""
    from merkat.sim.plots import plot_run

    for name in ("jobs.csv", "summary.json"):
        if not (run_dir / name).is_file():
            fail(f"{run_dir}: no {name} (not a run directory)")
    _check_complete(run_dir)
    try:
        paths = plot_run(run_dir, out)
    except (ValueError, KeyError, IndexError, UnicodeDecodeError) as e:
        fail(f"{run_dir}: not a complete run (jobs.csv or summary.json unreadable: {e})")
    for p in paths:
        print(p)


def _check_complete(run_dir: Path) -> None:
    """Refuse a run whose files do not belong together: jobs.csv must hold as many jobs as
    summary.json says (a truncated or mixed-up folder would be drawn under a wrong label)."""
    import csv

    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        with (run_dir / "jobs.csv").open(encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError as e:
        fail(f"{run_dir}: not UTF-8 text (byte {e.start})")
    except json.JSONDecodeError as e:
        fail(f"{run_dir / 'summary.json'}:{e.lineno}: invalid JSON: {e.msg}")
    jobs = summary.get("jobs") if isinstance(summary, dict) else None
    width = len(rows[0]) if rows else 0
    if not rows or any(len(r) != width for r in rows[1:]):
        fail(f"{run_dir / 'jobs.csv'}: truncated or malformed (rows of different lengths)")
    if isinstance(jobs, int) and len(rows) - 1 != jobs:
        fail(f"{run_dir}: jobs.csv has {len(rows) - 1} jobs, summary.json says {jobs}: "
             "not the files of one complete run")


@app.command("lublin")
def lublin_cmd(
    out: Path = typer.Option(..., "--out", help="SWF file to write (.gz compresses)."),
    jobs: int = typer.Option(10000, "--jobs", help="Number of jobs."),
    nodes: int = typer.Option(128, "--nodes", help="Machine size (nodes)."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
    jobtype: str = typer.Option("typeless", "--type", help="typeless | mixed (batch+interactive)."),
) -> None:
    """Generate a Lublin-Feitelson workload as SWF."""
    from merkat.sim.workload import lublin

    check_int("--jobs", jobs, 1, 10_000_000)
    check_int("--nodes", nodes, 2, 10_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    _check(
        jobtype in lublin.JOBTYPES,
        f"--type must be one of {', '.join(lublin.JOBTYPES)}, got {jobtype!r}",
    )
    lublin.write(out, jobs, seed, nodes, jobtype)
    print(out)


@bench.app.command("sim")
def bench_sim(
    trace: str = typer.Option(
        HPC2N_NAME, "--trace", help="A trace name (`merkat traces list`) or an SWF file."
    ),
    schedulers: str = typer.Option("fcfs,easy", "--schedulers", help="Comma-separated list."),
    repeat: int = typer.Option(3, "--repeat", help="Runs per scheduler; the best is reported."),
    cores: int | None = typer.Option(None, "--cores", help="Pool size (default: MaxProcs)."),
    general: bool = typer.Option(
        False, "--general", help="Use the general event engine, not the single-pool fast loops."
    ),
) -> None:
    """Simulator throughput on a trace as one pool of cores (JSON on stdout)."""
    from merkat.sim.cluster import Cluster
    from merkat.sim.metrics import summarize
    from merkat.sim.run import schedule
    from merkat.sim.workload.jobs import build_workload
    from merkat.sim.workload.swf import SwfError, read_swf

    try:
        path = find_trace(trace)
    except FileNotFoundError as e:
        fail(f"--trace: {e}")
    names = [s.strip() for s in schedulers.split(",") if s.strip()]
    for s in names:
        _check(s in SCHEDULERS, f"--schedulers: unknown scheduler {s!r}")
        _check(
            not SCHEDULERS[s].market,
            f"--schedulers: {s} is not a batch scheduler; time it with `merkat bench period`",
        )
    check_int("--repeat", repeat, 1, 1000)
    check_int("--cores", cores, 1, 100_000_000)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        tr = read_swf(path)
    except SwfError as e:
        fail(str(e))
    if len(tr) == 0:
        fail(f"{path}: no job records: nothing to time")
    read_s = time.perf_counter() - t0
    read_cpu_s = time.process_time() - c0
    pool = cores or tr.machine_size()
    if not pool:
        fail("--cores: the trace has no MaxProcs; give --cores")
    cluster = Cluster.pool(pool)
    t1 = time.perf_counter()
    wl = build_workload(tr, cluster)
    build_s = time.perf_counter() - t1
    results: dict[str, Any] = {}
    for s in names:
        best = best_cpu = float("inf")
        sched = None
        for _ in range(repeat):
            t, c = time.perf_counter(), time.process_time()
            sched = schedule(wl, cluster, s, use_fast=False if general else None)
            best = min(best, time.perf_counter() - t)
            best_cpu = min(best_cpu, time.process_time() - c)
        assert sched is not None
        m = summarize(wl, sched, cluster)
        results[s] = {
            "simulate_s": round(best, 4),
            "jobs_per_s": round(len(wl) / best),
            "simulate_cpu_s": round(best_cpu, 4),
            "jobs_per_cpu_s": round(len(wl) / max(best_cpu, 1e-9)),
            "avg_wait_s": round(m["avg_wait_s"], 3),
            "avg_bounded_slowdown": round(m["avg_bounded_slowdown"], 3),
        }
        results[s]["end_to_end_jobs_per_s"] = round(len(wl) / (read_s + build_s + best))
    print_json(
        {
            "benchmark": "sim",
            "trace": path.name,
            "jobs": len(wl),
            "cores": pool,
            "read_s": round(read_s, 4),
            "read_cpu_s": round(read_cpu_s, 4),
            "build_workload_s": round(build_s, 4),
            "repeat": repeat,
            "engine": "general" if general else "fast single-pool loops",
            "schedulers": results,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "python": platform.python_version(),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        }
    )
