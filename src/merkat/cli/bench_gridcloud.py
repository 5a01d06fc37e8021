"""``merkat bench gridcloud``: the grid-cloud simulator's speed (see
:mod:`merkat.bench.gridcloud` and docs/benchmarks.md). One JSON object on stdout."""

from __future__ import annotations

import typer

from merkat.cli import bench
from merkat.cli._common import fail, print_json


@bench.app.command("gridcloud")
def bench_gridcloud(
    tasks: int = typer.Option(5000, "--tasks", help="Tasks per user of the priority workload."),
    scales: str = typer.Option(
        "1,10", "--scales", help="Multiples K of the Powerful cluster for the scaling run."),
    scale_tasks: int = typer.Option(100, "--scale-tasks", help="Tasks per user, scaling run."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
) -> None:
    """Time gridcloud-priority's workload and the cost per task as the VMs grow (JSON)."""
    if tasks < 1:
        fail(f"--tasks must be >= 1, got {tasks}")
    if scale_tasks < 1:
        fail(f"--scale-tasks must be >= 1, got {scale_tasks}")
    try:
        ks = [int(x) for x in scales.split(",") if x.strip()]
    except ValueError:
        fail(f"--scales: expected integers separated by commas, got {scales!r}")
    if not ks or any(k < 1 for k in ks):
        fail(f"--scales: each multiple must be >= 1, got {scales!r}")
    from merkat.bench.gridcloud import bench as run

    print_json(run(tasks, ks, scale_tasks, seed))
