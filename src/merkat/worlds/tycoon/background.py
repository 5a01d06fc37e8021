"""A recorded price series replayed as the background of a simulated market.

``merkat prices --since T -o json|csv`` exports the live platform's prices, one row per period:
``period, time, cpu, memory`` (credits per core and per MiB, for one period). Replayed in the
simulator, the series stands for the demand of the live run's other users: in Tycoon's market
(:mod:`merkat.worlds.tycoon.simulator`) every host gets an outside bidder whose bid makes that host's spot
price the recorded one when nobody else bids (see docs/tycoon.md, "Background prices").

Decisions (docs/tycoon.md):

- the series is a step function: the price recorded at period ``k`` holds until period
  ``k + 1``'s time; before the first row the first price holds, after the last row the last;
- time 0 of the simulation is the first row's time;
- prices per period become prices per second by dividing by the period's length, the median
  gap between consecutive rows' times (``period_s`` overrides it; one row needs it).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

COLUMNS = ("period", "time", "cpu", "memory")


class PriceFileError(ValueError):
    """A price file that cannot be read; the message names the file and the line or item."""


@dataclass(frozen=True)
class PriceSeries:
    """``times`` (seconds from the first row), ``cpu`` (credits per core-second) and ``memory``
    (credits per MiB-second), one entry per recorded period; ``period_s`` the period length."""

    times: npt.NDArray[np.float64]
    cpu: npt.NDArray[np.float64]
    memory: npt.NDArray[np.float64]
    period_s: float

    def cpu_at(self, t: float) -> float:
        """The CPU price (credits per core-second) in force at ``t`` seconds (a step function)."""
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        return float(self.cpu[max(i, 0)])


def _number(v: Any, where: str) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise PriceFileError(f"{where}: not a number: {v!r}") from None
    if not math.isfinite(x) or x < 0:
        raise PriceFileError(f"{where}: must be a finite number >= 0, got {v!r}")
    return x


def _rows(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, row) for each row of the JSON or CSV export."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PriceFileError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno} "
                                 f"column {exc.colno}") from None
        items = data.get("items") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise PriceFileError(f"{path}: expected {{\"items\": [...]}} as written by "
                                 "`merkat prices --since T -o json`")
        out = []
        for i, it in enumerate(items):
            if not isinstance(it, dict):
                raise PriceFileError(f"{path}: item {i}: expected an object")
            out.append((f"{path}: item {i}", it))
        return out
    lines = [ln for ln in csv.reader(io.StringIO(text))]
    numbered = [(n, r) for n, r in enumerate(lines, start=1) if r and any(c.strip() for c in r)]
    if not numbered:
        raise PriceFileError(f"{path}: empty file")
    n0, header = numbered[0]
    header = [h.strip() for h in header]
    missing = [c for c in ("time", "cpu") if c not in header]
    if missing:
        raise PriceFileError(f"{path}: line {n0}: no {' or '.join(missing)} column (the header "
                             "of `merkat prices --since T -o csv` is period,time,cpu,memory)")
    out = []
    for n, r in numbered[1:]:
        if len(r) != len(header):
            raise PriceFileError(f"{path}: line {n}: {len(r)} fields, the header has "
                                 f"{len(header)}")
        out.append((f"{path}: line {n}", dict(zip(header, r, strict=True))))
    return out


def read_price_export(path: Path, period_s: float | None = None) -> PriceSeries:
    """The series in ``path`` (an export of ``merkat prices --since``), per second.

    Raises :class:`PriceFileError` naming the file and the line (CSV) or item (JSON)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PriceFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PriceFileError(f"{path}: not a text file") from None
    rows = _rows(path, text)
    if not rows:
        raise PriceFileError(f"{path}: no prices")
    times, cpu, mem = [], [], []
    for where, r in rows:
        for c in ("time", "cpu"):
            if r.get(c) in (None, ""):
                raise PriceFileError(f"{where}: no {c!r}")
        times.append(_number(r["time"], f"{where}: time"))
        cpu.append(_number(r["cpu"], f"{where}: cpu"))
        mem.append(_number(r.get("memory") or 0.0, f"{where}: memory"))
    t = np.array(times)
    if np.any(np.diff(t) <= 0):
        k = int(np.argmax(np.diff(t) <= 0)) + 1
        raise PriceFileError(f"{rows[k][0]}: time {times[k]} is not after the previous row's "
                             f"{times[k - 1]}")
    if period_s is None:
        if t.size < 2:
            raise PriceFileError(f"{path}: one row: give the period length (--background-period)")
        period_s = float(np.median(np.diff(t)))
    if not (math.isfinite(period_s) and period_s > 0):
        raise PriceFileError(f"period length must be a finite number > 0, got {period_s}")
    return PriceSeries(t - t[0], np.array(cpu) / period_s, np.array(mem) / period_s, period_s)
