"""The ``merkat`` command: noun-verb subcommands (``merkat market clear``, ``merkat bank audit``...).

Each noun is a module of this package exposing a Typer ``app``; it is registered below.
"""

from __future__ import annotations

import typer

import merkat.cli.bench_kubernetes  # registers `merkat bench kubernetes`
import merkat.cli.bench_period  # noqa: F401  (registers `merkat bench period`)
from merkat import __version__
from merkat.cli import bank, bench, experiment, market, report, sim

app = typer.Typer(
    name="merkat",
    help="merkat: a market-based resource manager for shared clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(market.app, name="market")
app.add_typer(bank.app, name="bank")
app.add_typer(sim.app, name="sim")
app.add_typer(bench.app, name="bench")
app.command("report")(report.report_cmd)
_ = experiment  # registers `merkat sim experiment` on the sim app


def _version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """merkat: a market-based resource manager for shared clusters."""


def main() -> None:
    app()
