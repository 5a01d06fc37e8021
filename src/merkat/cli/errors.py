"""The one error path of the ``merkat`` command.

Every failure ends the same way: one line ``error: ...`` on stderr naming the field, the file
(and line) or the thing that failed; exit code 2 for bad input and 1 for a failure at run time
(130 when interrupted); never a traceback unless ``--debug`` (or ``MERKAT_DEBUG=1``) asks for
one. Commands report expected problems themselves with :func:`merkat.cli._common.fail`; what
escapes a command is classified here by :func:`report`:

- click usage errors (unknown option, missing argument, bad value of a typed flag) → 2;
- :class:`BadInput`, and the domain errors that describe bad input (a malformed trace line, an
  invalid market, a bank refusal of an argument, a name no registry knows...) → 2;
- a missing input file (``FileNotFoundError``, ``IsADirectoryError``...) → 2, naming the file;
- another ``OSError`` (permissions, disk full, an unreachable server) → 1, naming the file;
- anything else is a bug: → 1, with the exception's type, and a hint to re-run with ``--debug``.

This module imports nothing heavy: domain error classes are looked up in ``sys.modules`` only
(an exception of a module that was never imported cannot have been raised).
"""

from __future__ import annotations

import os
import sys
import traceback

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that the command unwinds like on Ctrl-C: worker
    processes are stopped, temporary outputs removed, transactions rolled back. Not a
    KeyboardInterrupt (the command-line parser would turn that into a silent exit 130)."""


DEBUG_FLAG = "--debug"
DEBUG_ENV = "MERKAT_DEBUG"

_debug = False


class BadInput(Exception):
    """Bad input found deep inside a command: the message names the field, file or line."""

    exit_code = EXIT_BAD_INPUT


class RunFailure(Exception):
    """A failure at run time that is not a bug (the message says what failed)."""

    exit_code = EXIT_FAILURE


# (module, class) of domain errors that mean "bad input" (exit 2) when they reach the top.
_BAD_INPUT_CLASSES = (
    ("merkat.workload.swf", "SwfError"),
    ("merkat.market.types", "MarketError"),
    ("merkat.bank.errors", "InvalidInput"),
    ("merkat.bank.errors", "UnknownAccount"),
    ("merkat.bank.errors", "UnknownTransfer"),
    ("merkat.bank.errors", "DuplicateAccount"),
    ("merkat.bank.errors", "MalformedToken"),
    ("merkat.bank.errors", "BadDatabaseURL"),
    ("merkat.outputs", "OutputError"),
    ("merkat.registry", "UnknownName"),
    ("pydantic", "ValidationError"),
    ("json", "JSONDecodeError"),
)
# (module, class) of domain errors that are refusals or failures at run time (exit 1).
_FAILURE_CLASSES = (("merkat.bank.errors", "BankError"),)


def set_debug(on: bool) -> None:
    """Show tracebacks of reported errors (``--debug``)."""
    global _debug
    _debug = on


def debug() -> bool:
    """Whether ``--debug`` (or ``MERKAT_DEBUG``) is on."""
    return _debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def take_debug_flag(args: list[str]) -> tuple[list[str], bool]:
    """``args`` without any ``--debug`` (accepted anywhere before ``--``), and whether it was
    there."""
    out: list[str] = []
    found = False
    for i, a in enumerate(args):
        if a == "--":
            out += args[i:]
            break
        if a == DEBUG_FLAG:
            found = True
        else:
            out.append(a)
    return out, found


def _classes(specs: tuple[tuple[str, str], ...]) -> tuple[type[BaseException], ...]:
    found = []
    for module, name in specs:
        m = sys.modules.get(module)
        cls = getattr(m, name, None) if m is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def one_line(text: str) -> str:
    """``text`` on one line (line breaks become ``; ``), stripped."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return "; ".join(parts)


def classify(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message for an exception that escaped a command."""
    code = getattr(exc, "exit_code", None)
    if isinstance(exc, BadInput | RunFailure) and isinstance(code, int):
        return code, one_line(str(exc))
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED, "terminated"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted"
    if type(exc).__name__ == "Abort":  # click's: a prompt saw end of input
        return EXIT_FAILURE, "aborted"
    if isinstance(exc, _classes(_BAD_INPUT_CLASSES)):
        return EXIT_BAD_INPUT, one_line(str(exc))
    if isinstance(exc, _classes(_FAILURE_CLASSES)):
        return EXIT_FAILURE, one_line(str(exc))
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc) or type(exc).__name__
        where = f"{exc.filename}: " if exc.filename is not None else ""
        bad = isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError)
        return (EXIT_BAD_INPUT if bad else EXIT_FAILURE), one_line(f"{where}{what}")
    if isinstance(exc, MemoryError):
        return EXIT_FAILURE, "out of memory"
    text = one_line(str(exc))
    detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    hint = "" if debug() else f" (an internal error: run again with {DEBUG_FLAG} for the traceback)"
    return EXIT_FAILURE, f"{detail}{hint}"


def print_error(message: str) -> None:
    """Write ``error: message`` as one line on stderr."""
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr (its traceback first under ``--debug``); return the
    exit code."""
    code, message = classify(exc)
    if debug():
        traceback.print_exception(exc, file=sys.stderr)
    print_error(message)
    return code
