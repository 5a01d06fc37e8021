"""The ``merkat`` command: noun-verb subcommands (``merkat market clear``, ``merkat bank audit``...).

Each noun is a module of this package exposing a Typer ``app``; it is registered below. Command
modules import nothing heavy at their top (numpy, scipy, matplotlib, SQLAlchemy, FastAPI... are
imported inside the commands that use them), so ``merkat --help`` answers at once.

Every run goes through :meth:`MerkatGroup.main`, the one error path (:mod:`merkat.cli.errors`):
any failure is one line on stderr, exit 2 for bad input and 1 at run time, no traceback unless
``--debug`` is given (anywhere on the command line) or ``MERKAT_DEBUG=1`` is set.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

import typer
from typer import _click as click  # the click that this Typer ships (vendored)
from typer._click.utils import make_default_short_help
from typer.core import TyperGroup

from merkat import __version__
from merkat.cli import errors
from merkat.registry import Registry

# click's base exception, however this Typer ships click (vendored since Typer 0.2x)
ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class MerkatGroup(TyperGroup):
    """The root command group: parses, runs, and turns whatever escapes into one line.

    Its nouns (:data:`NOUNS`) are loaded on first use: ``merkat bank balance`` imports the bank's
    commands and nothing of the simulator, the service or the experiments, and ``merkat --help``
    lists the nouns without importing any of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(NOUNS.names())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in NOUNS:
            self.commands[cmd_name] = build_noun(NOUNS.get(cmd_name))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = formatter.width or 80
        limit = width - 6 - max(map(len, NOUNS.names()))
        rows = [(name, make_default_short_help(n.summary, limit)) for name, n in NOUNS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return self._click_resolve_command(ctx, args)
        except click.exceptions.UsageError as e:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                e.message = (f"{e.message.rstrip('.')}. Did you mean "
                             f"{', '.join(repr(m) for m in matches)}?")
            raise

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


@dataclass(frozen=True)
class Noun:
    """One top-level command, loaded on first use: ``module:attr`` is a Typer app (a noun with
    verbs) or a function (a command). ``summary`` is what ``merkat --help`` lists without
    importing the module (a test checks it against the loaded command's help); ``extra`` are
    modules that add subcommands to this noun when imported (``sim experiment``, ``bench ...``)."""

    name: str
    target: str
    summary: str
    extra: tuple[str, ...] = ()


NOUNS: Registry[Noun] = Registry("command")
"""The top-level commands, in ``merkat --help``'s order."""
for _noun in (
    Noun("report", "report:report_cmd",
         "Write one self-contained HTML page (figures embedded, summary table, parameters)."),
    Noun("server", "service:server",
         "Run the live service: REST API, applications manager and period loop (Ctrl-C stops "
         "it and destroys its VMs: processes, or pods with --backend kubernetes)."),
    Noun("demo", "service:demo",
         "Run the live service on a demo with more demand than this machine can serve: a "
         "deadline solver outbids best-effort ones to meet its deadline, a price-limited one is "
         "suspended when the price climbs and resumed when it falls."),
    Noun("submit", "client:submit", "Submit a virtual platform template to the server's queue."),
    Noun("prices", "client:prices",
         "The current prices (credits per core and per MiB, per period); with --since, the "
         "series since then."),
    Noun("nodes", "client:nodes", "The logical nodes and what is allocated on them."),
    Noun("events", "platforms:events",
         "The latest events (yours; an admin's: all), oldest first: submissions, state "
         "changes, charges, VM starts, failures and restarts, money returned."),
    Noun("market", "market:app", "The proportional-share market."),
    Noun("bank", "bank:app", "The bank: accounts, transfers, audit, keys and transfer tokens."),
    Noun("sim", "sim:app",
         "Trace-driven simulator: batch baselines (FCFS, EDF, EASY) on SWF workloads.",
         ("sim_run", "experiment")),
    Noun("bench", "bench:app", "Benchmarks; each prints a JSON object on stdout.",
         ("bank", "market", "sim", "tycoon", "bench_period", "bench_kubernetes", "bench_service",
          "bench_gridcloud", "bench_web", "bench_sweep", "bench_contention", "startup")),
    Noun("kubernetes", "kubernetes:app",
         "The Kubernetes backend: nodes as merkat sees them, the API emulator."),
    Noun("predict", "predict:app", "Price prediction (Tycoon §4) on a price history."),
    Noun("tycoon", "tycoon:app", "Tycoon's per-host auctions and Best Response."),
    Noun("traces", "traces:app",
         "Workload traces: the bundled one, the ones fetched from the archive."),
    Noun("policy", "policy:app", "Controller policies (SLO and scaling), by name."),
    Noun("user", "service:user_app", "Users of the live service and their API keys.",
         ("users",)),
    Noun("platform", "client:platform_app",
         "Virtual platforms on the server: list, show, stop, boost, logs, delete.",
         ("platforms",)),
    Noun("account", "client:account_app", "Your bank accounts on the server."),
    Noun("file", "files:app", "Your files on the server (the sources of a template's files_in)."),
):
    NOUNS.register(_noun)


def load_noun(noun: Noun) -> Any:
    """Import ``noun``'s module (and its ``extra`` modules) and return its Typer app or
    function."""
    module, attr = noun.target.split(":")
    mod = importlib.import_module(f"merkat.cli.{module}")
    for extra in noun.extra:
        importlib.import_module(f"merkat.cli.{extra}")
    return getattr(mod, attr)


def build_noun(noun: Noun) -> click.Command:
    """The click command of ``noun``, built as Typer builds a registered sub-app or command
    (plain help: rich_markup_mode None, like the root)."""
    from typer.main import get_command_from_info, get_group_from_info
    from typer.models import CommandInfo, TyperInfo

    target = load_noun(noun)
    cmd: click.Command
    if isinstance(target, typer.Typer):
        cmd = get_group_from_info(TyperInfo(target, name=noun.name), pretty_exceptions_short=True,
                                  suggest_commands=True, rich_markup_mode=None)
    else:
        cmd = get_command_from_info(CommandInfo(name=noun.name, callback=target),
                                    pretty_exceptions_short=True, rich_markup_mode=None)
    plain_help(cmd)
    return cmd


def plain_help(cmd: Any) -> None:
    """Drop the docstrings' reStructuredText literals from ``cmd``'s help (and its
    subcommands' and options'): ``-o json`` between double backquotes reads ``-o json`` in
    ``--help`` (the docstrings keep them for the API docs)."""
    for attr in ("help", "short_help"):
        text = getattr(cmd, attr, None)
        if text:
            setattr(cmd, attr, text.replace("``", ""))
    for param in getattr(cmd, "params", ()):
        if getattr(param, "help", None):
            param.help = param.help.replace("``", "")
    for sub in getattr(cmd, "commands", {}).values():
        plain_help(sub)


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




def _terminate(signum: int, frame: object) -> None:
    raise errors.Terminated()


def main() -> None:
    """The ``merkat`` command. SIGTERM unwinds the command like Ctrl-C (exit 143): a
    ``--workers`` run stops its worker processes instead of leaving them computing."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    app()
