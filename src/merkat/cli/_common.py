"""Shared CLI plumbing: output formats, one-line errors, JSON/table emission.

Conventions (Slurm/kubectl style): data on stdout, logs and errors on stderr, a table by
default and ``-o json`` for scripts, exit code 2 for bad input, 1 for other failures
(:mod:`merkat.cli.errors` is the one error path).

Start-up matters (scripts call ``merkat`` in loops): this module and every command module
import only the standard library, typer and light ``merkat`` modules at their top; rich is
imported when something is printed with it, and numpy, scipy, matplotlib, SQLAlchemy... inside
the command that needs them (``tests/test_cli_startup.py`` checks it).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import typer

from merkat.cli.errors import EXIT_BAD_INPUT, EXIT_FAILURE, debug, print_error
from merkat.outputs import json_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILURE"]


PIPED_WIDTH = 4096


@cache
def out_console() -> Console:
    """The rich console on stdout (created, and rich imported, on first use). Piped into a file
    or another program (not a terminal, no ``COLUMNS``), tables are never cut to 80 columns: a
    cell is printed whole, so ``merkat platform list | grep`` sees full names."""

    from rich.console import Console

    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(soft_wrap=True, width=PIPED_WIDTH if piped else None)


@cache
def err_console() -> Console:
    """The rich console on stderr, for progress bars and messages to humans."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


OutputOption = typer.Option(
    OutputFormat.table, "--output", "-o", help="Output format: table (default) or json."
)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print a one-line error on stderr and exit with ``code`` (under ``--debug``, the traceback
    of the exception being handled, if any, first)."""
    if debug() and sys.exc_info()[1] is not None:
        import traceback

        traceback.print_exc()
    print_error(message)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON on stdout (stable key order as given); a value that is
    not a finite number (NaN, Infinity) is written ``null``: the output is always valid JSON."""
    sys.stdout.write(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str, one_line: bool = False) -> str:
    """``text`` with its control characters shown as escapes (``\\x1b``), tab and newline
    kept (``one_line``: only tab). Text a server's user wrote (a file name of her template in
    an error, an outcome) reaches other people's terminals, an admin's: raw, an ESC could
    colour it, move the cursor up over earlier lines, retitle the terminal or hide a link
    (OSC 8), and a newline in one event could print a fake one."""
    return (_CONTROL_OR_NEWLINE if one_line else _CONTROL).sub(
        lambda m: f"\\x{ord(m.group()):02x}", text)


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table on stdout. Every cell, column name and the title are text, never rich
    markup: a reason, identity or path like ``refund [/]`` is printed as typed (this is the one
    place that renders tables, so the one place that escapes), its control characters as
    escapes (:func:`printable`)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=None if title is None else escape(printable(title)))
    for c in columns:
        table.add_column(escape(printable(str(c))))
    for r in rows:
        table.add_row(*[escape(printable(_fmt(v))) for v in r])
    out_console().print(table)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def emit(fmt: OutputFormat, data: Any, table: Callable[[], None]) -> None:
    """Emit ``data`` as JSON, or call ``table`` to print it for humans."""
    if fmt is OutputFormat.json:
        print_json(data)
    else:
        table()


class LazyProgress:
    """A rich progress bar on stderr that appears only once the run has lasted a second, and
    only on a terminal (a transient bar shows nothing in a file or a pipe). Drawn by the
    calls, ten times a second at most, with no refresh thread: a bar's thread renders its
    table ten times a second whatever the run does, a cost that grows with the run's wall
    time (6 % of a run's instructions under cachegrind; docs/benchmarks.md, twenty-fourth
    session)."""

    def __init__(self, total: int, label: str, t0: float) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.t0 = t0
        self.bar: Progress | Literal[False] | None = None  # False: not a terminal
        self.task: Any = None
        self.drawn = 0.0

    def __call__(self, advance: int) -> None:
        self.done += advance
        if self.bar is False:
            return
        now = time.perf_counter()
        if self.bar is None:
            if now - self.t0 < 1.0:
                return
            console = err_console()
            if not console.is_terminal:
                self.bar = False  # (nothing to show: never drawn)
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} jobs"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                auto_refresh=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=self.total)
        elif now - self.drawn < 0.1 and self.done < self.total:
            return  # redrawn ten times a second at most: cheap on runs of 200,000 jobs
        self.drawn = now
        self.bar.update(self.task, completed=min(self.done, self.total), refresh=True)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
