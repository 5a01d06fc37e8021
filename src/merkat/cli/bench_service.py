"""``merkat bench service``: parses the flags, runs :func:`merkat.bench.service.run` (the
live service's period time, ``GET /prices`` throughput and memory) and prints its JSON object."""

from __future__ import annotations

import json
import sys

import typer

from merkat.cli import bench


@bench.app.command("service")
def bench_service(
    platforms: int = typer.Option(20, "--platforms", min=1, help="Platforms to submit."),
    vms: int = typer.Option(10, "--vms", min=1, help="VMs per platform."),
    periods: int = typer.Option(10, "--periods", min=1, help="Periods to time."),
    seconds: float = typer.Option(5.0, "--seconds", min=0.5, help="GET /prices duration."),
    clients: int = typer.Option(4, "--clients", min=1, max=64, help="Concurrent clients."),
) -> None:
    """Time one period with many VMs, GET /prices throughput, and the server's memory."""
    from merkat.bench.service import run

    out = run(platforms, vms, periods, seconds, clients)
    sys.stdout.write(json.dumps(out) + "\n")
