"""``merkat sim ...``: the noun, compare and plot runs, generate Lublin-model workloads; and
``merkat bench sim``. ``merkat sim run`` is in :mod:`merkat.cli.sim_run`, ``merkat sim
experiment`` in :mod:`merkat.cli.experiment`.

Bad input (flags, trace lines) gives a one-line ``error: ...`` naming the flag or ``file:line``
and exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from merkat.cli import bench
from merkat.cli._common import (
    OutputFormat,
    OutputOption,
    emit,
    fail,
    print_json,
    print_table,
)
from merkat.cli.validate import check_int
from merkat.sim.schedulers import (  # light: each entry imports its engine when run
    OUTCOMES,
    SCHEDULERS,
)
from merkat.workload.traces import HPC2N_NAME, find_trace

app = typer.Typer(
    help="Trace-driven simulator: batch baselines (FCFS, EDF, EASY) on SWF workloads.",
    no_args_is_help=True,
)


def check(cond: bool, message: str) -> None:
    """Exit 2 with ``message`` (a one-line error naming the flag) unless ``cond``."""
    if not cond:
        fail(message)


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


def summary_table(runs: list[tuple[str, dict[str, Any]]]) -> None:
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
    emit(output, {name: s for name, s in runs}, lambda: summary_table(runs))


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
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out: {out} is a file; give a folder for the PNGs")
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
    from merkat.workload import lublin

    check_int("--jobs", jobs, 1, 10_000_000)
    check_int("--nodes", nodes, 2, 10_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    check(
        jobtype in lublin.JOBTYPES,
        f"--type must be one of {', '.join(lublin.JOBTYPES)}, got {jobtype!r}",
    )
    if out.is_dir():
        fail(f"--out: {out} is a folder; give a file name such as lublin.swf (.gz compresses)")
    try:
        lublin.write(out, jobs, seed, nodes, jobtype)
    except OSError as e:  # a missing folder, no permission, a full disk
        fail(f"--out: cannot write {out}: {e.strerror or e}")
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
    try:
        path = find_trace(trace)
    except FileNotFoundError as e:
        fail(f"--trace: {e}")
    names = [s.strip() for s in schedulers.split(",") if s.strip()]
    for s in names:
        check(s in SCHEDULERS, f"--schedulers: unknown scheduler {s!r}")
        check(
            not SCHEDULERS[s].market,
            f"--schedulers: {s} is not a batch scheduler; time it with `merkat bench period`",
        )
    check_int("--repeat", repeat, 1, 1000)
    check_int("--cores", cores, 1, 100_000_000)
    from merkat.bench.sim import run

    try:
        print_json(run(path, names, repeat=repeat, cores=cores, general=general))
    except ValueError as e:  # the trace's records (SwfError), nothing to time
        fail(str(e))
