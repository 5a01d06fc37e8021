"""Points in time on the command line (``--since``, ``--until``).

Accepted: Unix seconds (``1732400000``, ``1732400000.5``); an ISO 8601 date or date-time
(``2026-11-23``, ``2026-11-23T21:00``, ``2026-11-23 21:00:00+01:00``; no zone means UTC); or a
duration before now (``90s``, ``30m``, ``2h``, ``1d``).
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

from merkat.outputs import LATEST_TIME

_AGO = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd])$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_time(text: str, flag: str, now: float | None = None) -> float:
    """``text`` as Unix seconds; ValueError naming ``flag`` when it is none of the forms."""
    t = text.strip()
    if not t.isascii():  # float() and fromisoformat() read other scripts' digits ('５m', '٣')
        raise ValueError(f"{flag}: expected ASCII digits (Unix seconds, an ISO date-time or "
                         f"a duration ago such as 30m), got {text!r}")
    m = _AGO.match(t)
    if m:
        at = (time.time() if now is None else now) - float(m.group(1)) * _UNIT[m.group(2)]
        if not at >= 0:  # 99999999999d ago: before 1970, which no record is
            raise ValueError(f"{flag}: {text!r} ago is before 1970-01-01 (Unix time 0)")
        return at
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if not (math.isfinite(v) and 0 <= v <= LATEST_TIME):  # (1e300: no clock prints it)
            raise ValueError(f"{flag}: expected a time >= 0 and before the year 10000 "
                             f"({LATEST_TIME:.0f}), got {text!r}")
        return v
    try:
        d = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(
            f"{flag}: expected Unix seconds, an ISO date-time (2026-11-23T21:00) or a duration "
            f"ago (30m, 2h, 1d), got {text!r}"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return d.timestamp()
