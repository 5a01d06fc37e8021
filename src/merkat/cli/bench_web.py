"""``merkat bench dashboard`` and ``merkat bench events``: the dashboard's first load and the
event stream's delivery on a real server (see :mod:`merkat.bench.web`); JSON on stdout."""

from __future__ import annotations

import typer

from merkat.cli import bench
from merkat.cli._common import EXIT_FAILURE, fail, print_json


@bench.app.command("dashboard")
def bench_dashboard(
    vms: int = typer.Option(200, "--vms", min=1, help="VMs running (sleep processes)."),
    platforms: int = typer.Option(10, "--platforms", min=1, help="Platforms holding them."),
    repeat: int = typer.Option(5, "--repeat", min=1, help="Page loads measured."),
    period: float = typer.Option(2.0, "--period", min=0.1, help="Scheduling period, s."),
) -> None:
    """Dashboard first load in headless Chromium with VMS VMs running (target <= 1 s)."""
    from merkat.bench.web import bench_dashboard as run

    if platforms > vms:
        fail(f"--platforms ({platforms}) must not exceed --vms ({vms})")
    try:
        print_json(run(vms=vms, platforms=platforms, repeat=repeat, period=period))
    except RuntimeError as e:
        fail(str(e), EXIT_FAILURE)


@bench.app.command("events")
def bench_events(
    vms: int = typer.Option(200, "--vms", min=1, help="Events per period (one per VM)."),
    periods: int = typer.Option(20, "--periods", min=1, help="Periods produced."),
    period: float = typer.Option(1.0, "--period", min=0.01, help="Period length, s."),
) -> None:
    """The event stream under one event per VM per period: delivery lag, keeps up or not."""
    from merkat.bench.web import bench_events as run

    try:
        print_json(run(vms=vms, periods=periods, period=period))
    except RuntimeError as e:
        fail(str(e), EXIT_FAILURE)
