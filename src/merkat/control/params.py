"""The parameters of the built-in policies: declared beside each policy, checked in one place.

Every policy class declares ``PARAMS`` (a mapping from each keyword parameter of its
constructor to a :class:`Param`: its type and range) and ``PARAM_RULES`` (the checks that
read two parameters: ``low <= high``, ``forecast_history >= 4 x forecast_order``). The registry
(:func:`merkat.control.registry.check_params`, called by ``make_policy``) checks a policy's
parameters against them before the constructor runs, so a template's ``controller.params``,
the API and the simulator's ``--policy-param`` meet the same rules and one message form:
``NAME: must be <what>, got <value>`` (docs/control.md, "The registry").

Pure (it imports only :mod:`merkat.seeds`), so each policy's module declares its own.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from merkat.seeds import Stream

Kind = Literal["number", "integer", "flag", "choice", "seed", "any"]


class BadValue(ValueError):
    """A parameter's value is refused: the message is the reason (``must be ..., got ...``)."""


def _bound(lo: float, hi: float, lo_open: bool, hi_open: bool) -> str:
    if math.isinf(lo) and math.isinf(hi):
        return ""
    if math.isinf(hi):
        return f" {'>' if lo_open else '>='} {_num(lo)}"
    if math.isinf(lo):
        return f" {'<' if hi_open else '<='} {_num(hi)}"
    return f" in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}{')' if hi_open else ']'}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:  # an int too large for a float
        return False


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter's type and range. ``none``: null is allowed (the policy then picks its
    own default); ``words``: these strings are allowed too (``choice``: only these)."""

    kind: Kind
    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    none: bool = False
    words: tuple[str, ...] = ()

    def describe(self) -> str:
        """What the value must be, in words: ``a finite number in (0, 1]``."""
        if self.kind == "number":
            what = "a finite number" + _bound(self.lo, self.hi, self.lo_open, self.hi_open)
        elif self.kind == "integer":
            what = "an integer" + _bound(self.lo, self.hi, self.lo_open, self.hi_open)
        elif self.kind == "flag":
            what = "true or false"
        elif self.kind == "choice":
            what = "one of " + ", ".join(self.words)
        elif self.kind == "seed":
            what = "an integer >= 0"
        else:
            return "anything"
        if self.words and self.kind != "choice":
            what += " or " + " or ".join(map(repr, self.words))
        return what + (" or null (the default)" if self.none else "")

    def check(self, value: Any) -> Any:
        """``value`` as the policy takes it (an integral float of an integer parameter as
        an int); raises :class:`BadValue` naming what it must be."""
        kind = self.kind
        if kind == "seed" and type(value) is Stream:  # (a trace's every job: the fast path)
            return value
        if kind == "any" or (value is None and self.none):
            return value
        if isinstance(value, str) and value in self.words:
            return value
        ok: Any = _REFUSED
        if kind == "number":
            if type(value) is float or type(value) is int or (
                    isinstance(value, numbers.Real) and not isinstance(value, bool)):
                ok = value if _finite(value) and self._within(value) else _REFUSED
        elif kind == "integer":
            if isinstance(value, float | np.floating) and _finite(value) \
                    and float(value).is_integer():
                value = int(value)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
                ok = int(value) if self._within(value) else _REFUSED
        elif kind == "flag":
            ok = value if isinstance(value, bool) else _REFUSED
        elif kind == "seed":
            if isinstance(value, Stream | np.random.SeedSequence | np.random.Generator):
                ok = value
            elif isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
                ok = int(value) if int(value) >= 0 else _REFUSED
        if ok is _REFUSED:
            raise BadValue(f"must be {self.describe()}, got {_shown(value)}")
        return ok

    def _within(self, x: Any) -> bool:
        lo_ok = x > self.lo if self.lo_open else x >= self.lo
        hi_ok = x < self.hi if self.hi_open else x <= self.hi
        return bool(lo_ok and hi_ok)


_REFUSED = object()


def _shown(value: Any) -> str:
    """A refused value in a message: short, one line, a float in Python's spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number(lo: float = -math.inf, hi: float = math.inf, *, lo_open: bool = False,
           hi_open: bool = False, none: bool = False) -> Param:
    """A finite int or float (never a boolean or a text) within the bounds."""
    return Param("number", lo, hi, lo_open, hi_open, none)


def integer(lo: float = -math.inf, hi: float = math.inf, *, none: bool = False,
            words: tuple[str, ...] = ()) -> Param:
    """An int (or a float with no fraction: ``3.0``) within ``[lo, hi]``."""
    return Param("integer", lo, hi, none=none, words=words)


def choice(*words: str) -> Param:
    """One of these texts."""
    return Param("choice", words=words)


FLAG = Param("flag")
"""``true`` or ``false`` (a boolean, never a text: ``"no"`` was taken as true)."""
SEED = Param("seed")
"""An int >= 0, or (from code) a ``SeedSequence``, a ``Generator`` or a ``seeds.Stream``."""
ANY = Param("any")
"""Not checked (a parameter of a plugin's subclass that declares none)."""
FRACTION = number(0, 1)
"""A fraction of the VM size or of a budget, in [0, 1]."""
SHARE = number(0, 1, lo_open=True)
"""A fraction in (0, 1] (``start_fraction``)."""
COUNT = 10**6
"""The largest count of periods a parameter takes (a million periods: 95 years of 5 min)."""

def declare(*parts: Mapping[str, Param], **params: Param) -> Mapping[str, Param]:
    """A policy's ``PARAMS``: ``parts`` (its base class's, shared groups such as
    :data:`THRESHOLDS`) and ``params``, read-only."""
    out: dict[str, Param] = {}
    for part in parts:
        out.update(part)
    out.update(params)
    return MappingProxyType(out)


Check = Callable[[Mapping[str, Any], str], str | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """A check that reads several parameters, ``params``: ``test(values, name)`` (the values
    with the defaults filled in) returns the reason parameter ``name`` is refused, or None.
    ``name`` is the first of ``params`` the caller gave (the one to name), else the first."""

    params: tuple[str, ...]
    test: Check


def _low_high(p: Mapping[str, Any], name: str) -> str | None:
    low, high = p.get("low"), p.get("high")
    if low is None or high is None or low <= high:
        return None
    if name == "high":
        return f"must be >= low ({_shown(low)}), got {_shown(high)}"
    return f"must be <= high ({_shown(high)}), got {_shown(low)}"


LOW_HIGH = Rule(("low", "high"), _low_high)
"""The thresholds of the metric: ``low <= high`` (both > 0 by their ``Param``)."""

THRESHOLDS = declare(low=number(0, lo_open=True), high=number(0, lo_open=True))
"""``low`` and ``high``: fractions of the reference (docs/control.md, decision 1)."""
