"""While the database fails (docs/service.md, "The period loop"): requests get a clear 503,
and a caller whose key was valid a moment ago is still known.

- :func:`is_db_error`: an exception that comes from the database (SQLAlchemy's, the bank's
  :class:`~merkat.bank.errors.DatabaseError`), not from the request.
- :class:`KeyMemory`: the API keys seen valid in the last :data:`KEEP_S` seconds (by digest,
  at most :data:`SIZE`). The API reads a key in the database at every request (a revoked key
  fails at once); only when that read fails does it fall back on this memory, so another
  user's ``GET /api/v1/prices`` (served from memory) still answers while the period loop's
  database is broken. Decision: a key revoked just before the database failed may be
  honoured for at most :data:`KEEP_S` seconds more, and only while it fails (no revocation
  can be written then anyway).
- Any other request that needs the database answers ``503 {"detail": "database unavailable:
  ..."}`` with ``Retry-After``, never a 500.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

KEEP_S = 600.0
"""How long a key seen valid is honoured while the database cannot be read (s)."""

SIZE = 10_000
"""Keys remembered at most (the least recently seen are forgotten first)."""


def is_db_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the database failing (not a refusal of the request)."""
    from sqlalchemy.exc import SQLAlchemyError

    from merkat.bank.errors import DatabaseError

    return isinstance(exc, SQLAlchemyError | DatabaseError)


def unavailable(exc: BaseException) -> str:
    """The one-line 503 message for a database error."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"database unavailable: {type(exc).__name__}: {first}" if first else \
        f"database unavailable: {type(exc).__name__}"


class KeyMemory:
    """The keys seen valid lately (module doc); thread-safe."""

    def __init__(self, keep_s: float = KEEP_S, size: int = SIZE) -> None:
        self.keep_s, self.size = keep_s, size
        self._seen: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, digest: str, user: Any) -> None:
        with self._lock:
            self._seen[digest] = (user, time.monotonic())
            self._seen.move_to_end(digest)
            while len(self._seen) > self.size:
                self._seen.popitem(last=False)

    def recall(self, digest: str) -> Any:
        """The user of ``digest`` if it was seen valid within ``keep_s``, else None."""
        with self._lock:
            got = self._seen.get(digest)
        if got is None or time.monotonic() - got[1] > self.keep_s:
            return None
        return got[0]
