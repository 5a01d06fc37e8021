"""The parsed-trace cache: a large SWF file is decompressed and parsed once, then loaded.

Reading HPC2N (202,871 jobs, gzip) costs ~1.5 s of decompression and parsing, paid by every
``merkat sim run --trace``, every experiment's worker and every ``merkat bench`` before its first
period. :func:`read_swf <merkat.workload.swf.read_swf>` asks :func:`load` first and gives each
trace it parsed to :func:`store`.

Contract:

- **What is kept:** only a clean trace (no bad line skipped) of at least :data:`MIN_JOBS` jobs:
  its header and its ``(n, 18)`` float64 job array, in one uncompressed ``.npz`` file under
  ``<user cache dir>/merkat/parsed/`` (``$XDG_CACHE_HOME`` on Linux). A trace with bad lines is
  never kept, so ``strict`` and the bad lines' messages always come from the text.
- **When it is used:** the entry is keyed by the file's resolved path, size and modification
  time (nanoseconds) and :data:`VERSION`, and holds the key itself: any change of the file, a
  hash collision, a truncated or corrupt entry or another format is a miss (never an error), and
  the text is parsed again and the entry rewritten.
- **Same bytes:** a hit gives the same header and a bit-for-bit equal array (``.npy`` keeps
  float64 exactly), a fresh array each load (callers may write into it).
- **Best effort, safe to share:** an entry is written to a temporary file and renamed into
  place (two processes at once leave one whole entry); a cache that cannot be written (read-only,
  full) only costs the parse. Entries are loaded with ``allow_pickle=False``.
- **Bounded:** each write drops the entries whose trace is gone or changed (a test's scratch
  trace, a checkout removed), corrupt ones and stale temporary files, then the oldest beyond
  :data:`MAX_ENTRIES`.
- ``MERKAT_TRACE_CACHE=off`` turns it off (to time the parse itself); a value other than
  ``on`` or ``off`` is a ValueError from :func:`load` (``read_swf`` raises it as an
  ``SwfError``: exit 2 at the command line).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

VERSION = 1
"""Bumped whenever what a parse gives changes, so older entries are misses."""
MIN_JOBS = 5_000
"""Smaller traces parse in milliseconds: not worth a file in the cache."""
MAX_ENTRIES = 8
"""Entries kept at most (HPC2N's is ~29 MB)."""
ENV = "MERKAT_TRACE_CACHE"


def cache_dir() -> Path:
    """Where entries are kept (the user cache, platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("merkat")) / "parsed"


def enabled() -> bool:
    """``$MERKAT_TRACE_CACHE`` (read at each call): unset, empty or ``on`` (any case) is on,
    ``off`` is off; anything else is a ValueError naming the variable and its values."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice not in ("", "on", "off"):
        raise ValueError(f"{ENV}: must be on or off, got {os.environ[ENV]!r}")
    return choice != "off"


def _key(path: Path) -> str | None:
    """The entry's key for ``path`` as it is now; None when the cache is off or ``path`` cannot
    be read."""
    return _key_now(path) if enabled() else None


def _key_now(path: Path) -> str | None:
    try:
        resolved = path.resolve()
        st = resolved.stat()
    except OSError:
        return None
    return json.dumps([VERSION, str(resolved), st.st_size, st.st_mtime_ns])


def _current(entry: Path) -> bool:
    """Whether ``entry`` is whole and its trace is still the file it was read from."""
    try:
        with np.load(entry, allow_pickle=False) as z:
            key = str(z["key"])
        version, path = json.loads(key)[:2]
    except Exception:  # corrupt or another format
        return False
    return version == VERSION and _key_now(Path(path)) == key


def _prune(keep: Path) -> None:
    """Drop the stale entries and temporary files, then the oldest beyond the bound."""
    now = time.time()
    live: list[tuple[float, Path]] = []
    for f in keep.parent.iterdir():
        try:
            if f == keep:
                continue
            if f.suffix == ".tmp":
                if now - f.stat().st_mtime > 3600:  # a writer that died
                    f.unlink()
            elif f.suffix == ".npz":
                if _current(f):
                    live.append((f.stat().st_mtime, f))
                else:
                    f.unlink()
        except OSError:
            continue  # another process pruned it first
    for _, f in sorted(live, reverse=True)[MAX_ENTRIES - 1:]:
        f.unlink(missing_ok=True)


def _entry(key: str) -> Path:
    return cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"


def load(path: Path) -> tuple[dict[str, str], np.ndarray] | None:
    """The kept ``(header, data)`` of the trace at ``path``, or None (a miss)."""
    key = _key(path)
    if key is None:
        return None
    try:
        with np.load(_entry(key), allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            header = json.loads(str(z["header"]))
            data = z["data"]
    except Exception:  # absent, truncated, corrupt, another format: a miss, never an error
        return None
    if (not isinstance(header, dict) or data.dtype != np.float64 or data.ndim != 2
            or data.shape[1] != 18 or data.shape[0] < MIN_JOBS):
        return None
    return {str(k): str(v) for k, v in header.items()}, data


def store(path: Path, header: dict[str, str], data: np.ndarray, skipped: int) -> None:
    """Keep a trace just parsed from ``path`` (see the module's contract for which)."""
    if skipped or data.shape[0] < MIN_JOBS:
        return
    key = _key(path)
    if key is None:
        return
    target = _entry(key)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, key=np.array(key), header=np.array(json.dumps(header)),
                         data=np.ascontiguousarray(data, dtype=np.float64))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _prune(target)
    except OSError:
        return  # a cache that cannot be written only costs the parse
