"""``merkat bench startup``: parses the flags, runs :func:`merkat.bench.startup.run` (how
fast the ``merkat`` command answers, as whole processes) and prints its JSON object."""

from __future__ import annotations

import typer

from merkat.cli import bench
from merkat.cli._common import fail, print_json


@bench.app.command("startup")
def bench_startup(
    runs: int = typer.Option(5, "--runs", min=1, max=100, help="Timed runs of each command."),
    warmup: int = typer.Option(1, "--warmup", min=0, max=10, help="Untimed runs first."),
) -> None:
    """Start-up time of `merkat --help`, `bank balance`, `bank transfer` (SQLite); JSON."""
    from merkat.bench.startup import run

    try:
        print_json(run(runs, warmup))
    except RuntimeError as exc:
        fail(str(exc), 1)
