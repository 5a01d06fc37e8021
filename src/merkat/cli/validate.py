"""The one validator of numeric command-line flags.

Every float flag of every command goes through :func:`check_float`: it must be a finite number
(``inf``, ``nan``, ``1e999`` are refused) inside the flag's sane range, else the command stops
with a one-line ``error: --flag ...`` and exit code 2 before doing anything. Integer flags with
a range (counts, seeds, cores) go through :func:`check_int`; a name chosen from a registry
(``--scheduler``, ``--policy``, ``--market``, ``--economy``...) through :func:`check_choice`. Ranges are per flag and written
where the flag is declared, so ``--help`` and the error say the same thing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from merkat.cli.errors import BadInput

__all__ = ["check_choice", "check_float", "check_int"]


def check_float(
    flag: str,
    value: float | None,
    lo: float,
    hi: float,
    *,
    lo_open: bool = False,
) -> float | None:
    """``value`` if it is ``None`` or a finite number in ``[lo, hi]`` (``(lo, hi]`` with
    ``lo_open``); else raise :class:`BadInput` (exit 2) naming ``flag``."""
    if value is None:
        return None
    left = "(" if lo_open else "["
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise BadInput(f"{flag} must be a finite number in {left}{lo:g}, {hi:g}], got {value}")
    if value > hi or value < lo or (lo_open and value == lo):
        raise BadInput(f"{flag} must be in {left}{lo:g}, {hi:g}], got {value:g}")
    return float(value)


def check_int(flag: str, value: int | None, lo: int, hi: int) -> int | None:
    """``value`` if it is ``None`` or an integer in ``[lo, hi]``; else :class:`BadInput`."""
    if value is None:
        return None
    if not lo <= value <= hi:
        raise BadInput(f"{flag} must be an integer in [{lo}, {hi}], got {value}")
    return value


def check_choice(flag: str, value: str, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices`` (a :class:`merkat.registry.Registry` or names);
    else :class:`BadInput` listing them, sorted."""
    known = sorted(choices)
    if value not in known:
        raise BadInput(f"{flag} must be one of {', '.join(known)}, got {value!r}")
    return value
