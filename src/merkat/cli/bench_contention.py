"""``merkat bench contention``: parses the flags, runs a scenario of
:mod:`merkat.bench.contention` (a real server under more CPU demand than it sells) and prints
its figures as a table or, with ``-o json``, as JSON."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import typer

from merkat.bench.contention import Scenario, Server, run_deadline, run_load
from merkat.cli import bench
from merkat.cli._common import EXIT_FAILURE, OutputFormat, OutputOption, emit, fail, print_table


@bench.app.command("contention")
def bench_contention(
    scenario: Scenario = typer.Option(Scenario.load, "--scenario",
                                      help="load: CLI/API latency and period drift under 2x "
                                      "the allocatable CPU; deadline: issue 26's deadline "
                                      "solver beside three best-effort ones."),
    duration: float = typer.Option(60.0, "--duration", min=5.0, max=3600.0,
                                   help="load: seconds of measurement."),
    period: float = typer.Option(5.0, "--period", min=0.5, max=600.0,
                                 help="The server's scheduling period, s."),
    reserve_cpu: float | None = typer.Option(None, "--reserve-cpu", min=0.0,
                                             help="backend.reserve_cpu of the server "
                                             "(default: the server's, 0.5)."),
    keep: bool = typer.Option(False, "--keep", help="Keep the scratch data directory."),
    output: OutputFormat = OutputOption,
) -> None:
    """A real server under more CPU demand than it sells: CLI and API latency and period
    drift (--scenario load), or a deadline solver among best-effort ones (--scenario
    deadline). A table, or JSON with -o json."""
    srv = Server(period, reserve_cpu)
    try:
        srv.start()
        out = run_deadline(srv) if scenario is Scenario.deadline else run_load(srv, duration)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        srv.stop(keep)
        fail(f"bench contention: {exc}", EXIT_FAILURE)
    except KeyboardInterrupt:
        srv.stop(keep)
        raise
    srv.stop(keep)
    if keep:
        out["data_dir"] = str(srv.data)
    emit(output, out, lambda: _table(out))


def _table(out: dict[str, Any]) -> None:
    if out["scenario"] == "deadline":
        print_table(None, ["PLATFORM", "BUDGET", "OUTCOME", "DEADLINE S", "FINISHED S", "PAID",
                           "REFUNDED", "RETURNED"], [
            (p["name"], p["budget"], p["outcome"], p["deadline_s"], p["finished_s"], p["paid"],
             p["refunded"], p["returned"]) for p in out["platforms"]])
        return
    print_table(None, ["MEASURE", "VALUE", "TARGET"], [
        ("allocatable cpu / reserve", f"{out['allocatable_cpu']:g} / {out['reserve_cpu']:g}",
         ""),
        ("VMs (1 core each) running", f"{out['vms_running_at_end']}/{out['vms']}", ""),
        ("CLI p50 / p95 s", f"{out['cli_p50_s']} / {out['cli_p95_s']}", "p95 <= 1.5"),
        ("API p50 / p95 s", f"{out['api_p50_s']} / {out['api_p95_s']}", ""),
        ("period drift", f"{out['period_drift']}", "<= 0.05"),
        ("period late max s / missed", f"{out['period_late_max_s']} / {out['periods_missed']}",
         ""),
        ("CLI calls (errors)", f"{out['cli_calls']} ({out['cli_errors']})", ""),
    ])
    sys.stdout.flush()
