"""The ``merkat`` command: noun-verb subcommands (``merkat market clear``, ``merkat bank audit``...).

Each noun is a module of this package exposing a Typer ``app``; it is registered below. Command
modules import nothing heavy at their top (numpy, scipy, matplotlib, SQLAlchemy, FastAPI... are
imported inside the commands that use them), so ``merkat --help`` answers at once.

Every run goes through :meth:`MerkatGroup.main`, the one error path (:mod:`merkat.cli.errors`):
any failure is one line on stderr, exit 2 for bad input and 1 at run time, no traceback unless
``--debug`` is given (anywhere on the command line) or ``MERKAT_DEBUG=1`` is set.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from merkat import __version__
from merkat.cli import errors

# click's base exception, however this Typer ships click (vendored since Typer 0.2x)
ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class MerkatGroup(TyperGroup):
    """The root command group: parses, runs, and turns whatever escapes into one line."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv, dbg = errors.take_debug_flag(list(sys.argv[1:] if args is None else args))
        errors.set_debug(dbg)
        try:
            rv = super().main(
                args=argv,
                prog_name=prog_name or "merkat",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = rv if isinstance(rv, int) else errors.EXIT_OK
            if code == errors.EXIT_INTERRUPTED:  # typer turned Ctrl-C into a silent exit
                errors.print_error("interrupted")
        except ClickException as exc:  # usage errors: bad flag, missing argument... → 2
            code = getattr(exc, "exit_code", errors.EXIT_BAD_INPUT)
            if type(exc).__name__ == "NoArgsIsHelpError":  # `merkat bank` alone: its help
                exc.show()  # type: ignore[attr-defined]
            else:
                ctx = getattr(exc, "ctx", None)
                where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
                errors.print_error(f"{exc.format_message().rstrip('.')}{where}")  # type: ignore[attr-defined]
        except (Exception, KeyboardInterrupt, errors.Terminated) as exc:
            code = errors.report(exc)
        finally:
            errors.set_debug(False)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="merkat",
    cls=MerkatGroup,
    help="merkat: a market-based resource manager for shared clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rendering it with rich would import rich at start-up
)


def _register() -> None:
    from merkat.cli import (
        bank,
        bench,
        bench_gridcloud,
        bench_kubernetes,
        bench_period,
        bench_service,
        bench_web,
        client,
        experiment,
        kubernetes,
        market,
        policy,
        predict,
        report,
        service,
        sim,
        startup,
        traces,
        tycoon,
    )

    app.add_typer(market.app, name="market")
    app.add_typer(bank.app, name="bank")
    app.add_typer(sim.app, name="sim")
    app.add_typer(bench.app, name="bench")
    app.add_typer(kubernetes.app, name="kubernetes")
    app.add_typer(predict.app, name="predict")
    app.add_typer(tycoon.app, name="tycoon")
    app.add_typer(traces.app, name="traces")
    app.add_typer(policy.app, name="policy")
    app.command("report")(report.report_cmd)
    # the live service (docs/service.md): the server, its users, and the client commands
    app.command("server")(service.server)
    app.command("demo")(service.demo)
    app.add_typer(service.user_app, name="user")
    app.command("submit")(client.submit)
    app.add_typer(client.platform_app, name="platform")
    app.command("prices")(client.prices)
    app.command("nodes")(client.nodes)
    app.command("events")(client.events)
    app.add_typer(client.account_app, name="account")
    # these register `sim experiment` and the `bench` subcommands on the apps above
    _ = (experiment, bench_period, bench_kubernetes, bench_service, bench_gridcloud, bench_web,
         startup)


def _version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(
        False,
        errors.DEBUG_FLAG,
        help="On an error, show the traceback too (also accepted after the subcommand, or "
        f"set {errors.DEBUG_ENV}=1).",
    ),
) -> None:
    """merkat: a market-based resource manager for shared clusters."""


_register()


def _terminate(signum: int, frame: object) -> None:
    raise errors.Terminated()


def main() -> None:
    """The ``merkat`` command. SIGTERM unwinds the command like Ctrl-C (exit 143): a
    ``--workers`` run stops its worker processes instead of leaving them computing."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    app()
