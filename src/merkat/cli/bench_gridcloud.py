"""``merkat bench gridcloud``: the grid-cloud simulator's speed (see
:mod:`merkat.bench.gridcloud` and docs/benchmarks.md). One JSON object on stdout."""

from __future__ import annotations

import typer

from merkat.cli import bench
from merkat.cli._common import fail, print_json
from merkat.cli.validate import check_int

MAX_TASKS = 100_000
"""Tasks per user, at most (20 users: 2,000,000 tasks, 20 times the benchmark's; 10^8 ran
out of memory)."""
MAX_SCALE = 100
"""The largest multiple K of the Powerful cluster (1,000 hosts and users; 10^8 never ended)."""


@bench.app.command("gridcloud")
def bench_gridcloud(
    tasks: int = typer.Option(5000, "--tasks", help="Tasks per user of the priority workload, in [1, 100,000]."),
    scales: str = typer.Option(
        "1,10", "--scales", help="Multiples K of the Powerful cluster for the scaling run, each in [1, 100]."),
    scale_tasks: int = typer.Option(100, "--scale-tasks", help="Tasks per user, scaling run."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
) -> None:
    """Time gridcloud-priority's workload and the cost per task as the VMs grow (JSON)."""
    check_int("--tasks", tasks, 1, MAX_TASKS)
    check_int("--scale-tasks", scale_tasks, 1, MAX_TASKS)
    check_int("--seed", seed, 0, 2**32 - 1)
    try:
        ks = [int(x) for x in scales.split(",") if x.strip()]
    except ValueError:
        fail(f"--scales: expected integers separated by commas, got {scales!r}")
    if not ks or any(not 1 <= k <= MAX_SCALE for k in ks):
        fail(f"--scales: each multiple must be in [1, {MAX_SCALE}], got {scales!r}")
    from merkat.bench.gridcloud import bench as run

    print_json(run(tasks, ks, scale_tasks, seed))
