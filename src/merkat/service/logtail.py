"""VM logs in bounded memory: read the end of a file, keep a file under a size.

- :func:`tail` reads the last ``n`` lines of a file by blocks from its end, at most
  ``max_bytes`` of it (``GET .../logs?tail=N`` on a 200 MB log reads 1 MB, not 200).
- :func:`cap` keeps a log under ``max_bytes``: past it the file keeps its newest half (from a
  line start), after a line ``[merkat: N bytes of older output dropped]``. The VM's output fd
  is opened with ``O_APPEND``, so it goes on writing at the new end; output written between
  the read and the truncation (microseconds) may appear before the kept half.
- :func:`platform_logs`: ``GET .../logs``, every VM's tail within one read budget.
- :class:`LogCap` runs :func:`cap` over every ``*.log`` under a directory: the manager calls it
  after each period, the server every few seconds (:meth:`LogCap.run`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

BLOCK = 64 * 1024
LOG_CHECK = 2.0
"""Seconds between the server's checks of the VMs' log sizes (besides after each period)."""


def tail(path: Path, n: int, max_bytes: int) -> list[str]:
    """The last ``n`` lines of ``path`` (decoded, errors replaced), reading at most
    ``max_bytes`` from its end (a line cut by that bound is left out, unless it is the only
    one). Missing: []."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return []
    with f:
        end = f.seek(0, os.SEEK_END)
        floor = max(0, end - max_bytes)
        pos, chunks, newlines = end, [], 0
        while pos > floor and newlines <= n:
            step = min(BLOCK, pos - floor)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
    lines = b"".join(reversed(chunks)).decode(errors="replace").splitlines()
    if pos > 0 and len(lines) > 1:  # started within a line: drop its partial end
        lines = lines[1:]
    return lines[-n:] if n > 0 else []


def cap(path: Path, max_bytes: int) -> int:
    """Keep ``path`` under ``max_bytes`` (module doc); returns the bytes dropped (0: none)."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    if size <= max_bytes:
        return 0
    keep = max_bytes // 2
    try:
        with open(path, "rb") as f:
            f.seek(size - keep)
            data = f.read(keep)
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data = data[cut + 1:]
        dropped = size - len(data)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"[merkat: {dropped} bytes of older output dropped]\n".encode()
                     + data)
        finally:
            os.close(fd)
    except OSError:
        return 0
    return dropped


def platform_logs(base: Path, n: int, budget: int) -> str:
    """The last ``n`` lines of each ``*.log`` in ``base``, each under a ``==> file <==``
    header, reading at most ``budget`` bytes in all (shared by the files, at least 4 KB
    each): a platform of 100 VMs with big logs answers ~``budget`` bytes, not 100 times it."""
    files = sorted(base.glob("*.log")) if base.is_dir() else []
    each = max(4096, budget // max(1, len(files)))
    parts = [f"==> {f.name} <==\n" + "\n".join(tail(f, n, each)) for f in files]
    return "\n".join(parts) + ("\n" if parts else "")


class LogCap:
    """After each period: :func:`cap` every ``*.log`` under ``root`` (a manager observer)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes

    def __call__(self, *_: Any) -> None:
        with contextlib.suppress(OSError):
            for d in self.root.iterdir() if self.root.is_dir() else ():
                for f in d.glob("*.log") if d.is_dir() else ():
                    cap(f, self.max_bytes)

    def run(self, stop: threading.Event, every: float) -> None:
        """Cap every ``every`` seconds until ``stop`` is set (a thread of the server)."""
        while not stop.wait(every):
            self()
