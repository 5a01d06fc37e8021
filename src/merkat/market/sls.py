"""Tycoon's Service Location Service (Tycoon §2.2): the directory of available hosts.

Pure: no I/O, no clock (every call takes ``now``). Tycoon's architecture has a Bank, the
Service Location Service (SLS) "which maintains information on available resources", and an
Auctioneer on each host. Here:

- a host's auctioneer **registers** (:meth:`ServiceLocationService.register`) its capacity
  (CPUs) and what its auction currently holds: the sum of the bids on it (credits per second;
  its spot price is bids / capacity, credits per CPU-second). Registering again is a
  **refresh**: the record is replaced and lives ``ttl_s`` more seconds;
- a record not refreshed within ``ttl_s`` **expires**: :meth:`~ServiceLocationService.query`
  never returns it, :meth:`~ServiceLocationService.expire` drops it (a host that died or left
  stops being offered); :meth:`~ServiceLocationService.deregister` removes one at once;
- an agent **queries** (:meth:`~ServiceLocationService.query`) for the best hosts to bid on,
  by Best Response's own criterion (eq. 1-2, :mod:`merkat.market.best_response`): hosts in
  decreasing order of w_j/y_j, the value per unit of the others' bids — the capacity over the
  bids, the bids raised to the ``reserve`` price (an empty host costs the reserve). It is the
  order in which Best Response funds hosts (a host is funded only if every host of higher
  w/y is), so the first ``limit`` hosts are the ones a user with a small budget funds; with no
  limit every live host comes back and Best Response over them is Best Response over the
  whole market. Ties go by ``tiebreak`` (a rank per host: the simulator's seeded order), else
  by registration order.

The SLS knows what hosts last told it: between refreshes the prices it returns are stale (the
agent re-bids against each host's live auction afterwards, as Tycoon's agents do).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from merkat.market.types import MarketError

HostId = Hashable


class SLSError(MarketError):
    """Bad input to the Service Location Service; ``field`` names the offending input."""


@dataclass(frozen=True)
class HostRecord:
    """What the SLS knows of one host: its capacity (CPUs), the sum of the bids on it at its
    last refresh (credits per second), when it registered first and last, and until when the
    record is valid."""

    host: HostId
    capacity: float
    bids: float
    registered_at: float
    refreshed_at: float
    expires_at: float

    @property
    def price(self) -> float:
        """The spot price at the last refresh: bids / capacity (credits per CPU-second)."""
        return self.bids / self.capacity


def _number(field: str, v: float, low: float, strict: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
        raise SLSError(field, f"must be a number, got {v!r}")
    f = float(v)
    if not math.isfinite(f) or f < low or (strict and f == low):
        raise SLSError(field, f"must be a finite number {'>' if strict else '>='} {low:g}, "
                              f"got {v!r}")
    return f


class ServiceLocationService:
    """The directory; ``ttl_s`` (> 0) is how long a registration lives without a refresh."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = _number("ttl_s", ttl_s, 0.0, strict=True)
        self._records: dict[HostId, HostRecord] = {}
        self._order: dict[HostId, int] = {}  # registration order, for ties

    def __len__(self) -> int:
        return len(self._records)

    def register(self, host: HostId, capacity: float, bids: float, now: float) -> HostRecord:
        """Register ``host`` (or refresh its record) with its ``capacity`` (> 0) and the sum of
        the ``bids`` on it (>= 0) at ``now``; the record lives until ``now + ttl_s``."""
        cap = _number("capacity", capacity, 0.0, strict=True)
        b = _number("bids", bids, 0.0, strict=False)
        t = _number("now", now, -math.inf, strict=False)
        old = self._records.get(host)
        if old is not None and t < old.refreshed_at:
            raise SLSError("now", f"host {host!r} refreshed at {old.refreshed_at:g}, "
                                  f"cannot register at an earlier {t:g}")
        rec = HostRecord(host, cap, b, t if old is None else old.registered_at, t,
                         t + self.ttl_s)
        self._records[host] = rec
        self._order.setdefault(host, len(self._order))
        return rec

    def register_many(self, hosts: Sequence[HostId], capacity: npt.ArrayLike,
                      bids: npt.ArrayLike, now: float) -> None:
        """:meth:`register` for each host (one refresh of a whole cluster)."""
        cap = np.broadcast_to(np.asarray(capacity, dtype=np.float64), (len(hosts),))
        b = np.broadcast_to(np.asarray(bids, dtype=np.float64), (len(hosts),))
        if not (np.isfinite(cap).all() and (cap > 0).all()):
            raise SLSError("capacity", "must be finite numbers > 0")
        if not (np.isfinite(b).all() and (b >= 0).all()):
            raise SLSError("bids", "must be finite numbers >= 0")
        t = _number("now", now, -math.inf, strict=False)
        for h, c, x in zip(hosts, cap.tolist(), b.tolist(), strict=True):
            old = self._records.get(h)
            if old is None:
                self._order.setdefault(h, len(self._order))
            elif t < old.refreshed_at:
                raise SLSError("now", f"host {h!r} refreshed at {old.refreshed_at:g}, "
                                      f"cannot register at an earlier {t:g}")
            self._records[h] = HostRecord(h, c, x, t if old is None else old.registered_at, t,
                                          t + self.ttl_s)

    def deregister(self, host: HostId) -> bool:
        """Remove ``host`` now (a host leaving); False if it was not registered."""
        self._order.pop(host, None)
        return self._records.pop(host, None) is not None

    def expire(self, now: float) -> list[HostId]:
        """Drop the records not refreshed since ``now - ttl_s``; return their hosts."""
        gone = [h for h, r in self._records.items() if r.expires_at <= now]
        for h in gone:
            self.deregister(h)
        return gone

    def live(self, now: float) -> list[HostRecord]:
        """Every record still valid at ``now``, in registration order."""
        return [r for r in self._records.values() if r.expires_at > now]

    def query(self, now: float, limit: int | None = None, *, reserve: float = 0.0,
              tiebreak: Mapping[HostId, float] | npt.ArrayLike | None = None
              ) -> list[HostRecord]:
        """The best hosts to bid on at ``now``, best first: decreasing capacity /
        max(bids, ``reserve``) (Best Response's w/y), ties by ``tiebreak`` (a mapping host →
        rank, or an array indexed by integer host ids; lower first), then registration order;
        at most ``limit`` (>= 1; None: every live host). A host whose bids and reserve are both
        0 (free, no reserve price) ranks first."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise SLSError("limit", f"must be an integer >= 1, got {limit!r}")
        r = _number("reserve", reserve, 0.0, strict=False)
        recs = self.live(now)
        if not recs:
            return []
        cap = np.array([x.capacity for x in recs])
        y = np.maximum(np.array([x.bids for x in recs]), r)
        with np.errstate(divide="ignore"):
            value = np.where(y > 0, cap / np.where(y > 0, y, 1.0), np.inf)
        reg = np.array([self._order[x.host] for x in recs], dtype=np.float64)
        if tiebreak is None:
            tie = reg
        elif isinstance(tiebreak, Mapping):
            tie = np.array([float(tiebreak.get(x.host, math.inf)) for x in recs])
        else:
            ranks = np.asarray(tiebreak, dtype=np.float64)
            tie = np.array([ranks[int(x.host)] for x in recs])  # type: ignore[call-overload]
        order = np.lexsort((reg, tie, -value))
        if limit is not None:
            order = order[:limit]
        return [recs[i] for i in order]
