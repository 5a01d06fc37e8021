"""One server per data directory: an exclusive lock held while the server runs.

:class:`DataDirLock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<data_dir>/server.lock``
and writes the holder's pid there; the kernel drops the lock when the process ends, however
it ends (a SIGKILLed server's directory is free at once). A second server on the same
directory is refused with one line naming the holder. ``merkat user add`` and the other
commands reading the database do not take it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

LOCK_FILE = "server.lock"


class LockedError(RuntimeError):
    """Another server holds the data directory (one line, naming it and its pid)."""


class DataDirLock:
    """The exclusive lock of one data directory (module doc)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lock (the directory must exist); raises :class:`LockedError` when another
        process (or another server in this one) holds it. Idempotent."""
        import fcntl

        if self._file is not None:
            return
        f = open(self.path, "a+")  # noqa: SIM115 - held open while the server runs
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise LockedError(f"another merkat server{who} is running on the data directory "
                              f"{self.path.parent}; stop it, or give this one its own "
                              "--data-dir") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(OSError):
                f.truncate(0)
            f.close()
