"""Outputs that never lie: every file merkat writes appears whole or not at all.

Contract:

- :func:`write_atomic` writes a file under a temporary name in the same directory, flushes and
  fsyncs it, then renames it over the target (``os.replace``): a reader sees the old file or
  the new one, never a mix or a truncated file. ``mode`` is set at creation (a private key is
  never readable by others, even for an instant).
- :func:`replace_all` renames several prepared temporary files into place only once all of
  them were written (a key pair is replaced both or neither).
- :func:`prepare_out_dir` checks an ``--out`` directory *before* a run: refused when it is a
  file, non-empty (unless ``force``) or not writable. :func:`output_dir` then lets the run
  write into a fresh temporary sibling directory that replaces ``--out`` at the end, so an
  interrupted run leaves the previous results untouched and never mixes files of two runs.

Errors are :class:`OutputError` (bad input, naming the path).

Values printed for people: :func:`json_safe` (JSON without NaN), :func:`time_text` and
:func:`seconds_text` (a time or a duration that no clock can print, a stored deadline of
``1e300`` s, shown as ``-`` or ``>100 years`` rather than failing the whole listing).
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "OutputError",
    "json_safe",
    "output_dir",
    "prepare_out_dir",
    "replace_all",
    "seconds_text",
    "time_text",
    "write_atomic",
]

LATEST_TIME = 253402300799.0
"""The last second a clock prints (9999-12-31 23:59:59 UTC): later, ``time.localtime`` fails
(``OverflowError``, ``OSError``, ``ValueError`` depending on how far and on the platform)."""

FAR = 100 * 365.25 * 86400
"""A duration printed as ``>100 years`` rather than in seconds."""


class OutputError(ValueError):
    """An output path that cannot be used (the message names it)."""


def json_safe(data: Any) -> Any:
    """``data`` with every non-finite float (NaN, ±Infinity: not JSON) replaced by ``None``."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def time_text(t: Any, fmt: str = "%H:%M:%S", *, utc: bool = False) -> str | None:
    """``t`` (Unix seconds) written with ``fmt`` in local time (``utc``: UTC); None for None;
    ``-`` for a time no clock prints (NaN, infinity, before 1970, after the year 9999, not a
    number): one row stored before a bound existed must not fail a whole listing."""
    if t is None:
        return None
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= LATEST_TIME:
        return "-"
    try:
        return time.strftime(fmt, time.gmtime(t) if utc else time.localtime(t))
    except (OverflowError, OSError, ValueError):  # (a platform's narrower time_t)
        return "-"


def seconds_text(v: Any) -> str:
    """A duration as ``"N s"`` (rounded); ``">100 years"`` past :data:`FAR` (infinity
    included), ``"-"`` for NaN or not a number. Negative durations keep their sign."""
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
        return "-"
    if abs(v) > FAR:
        return f"{'-' if v < 0 else ''}>100 years"
    return f"{v:.0f} s"


def _tmp_file(path: Path, data: bytes, mode: int) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def replace_all(files: list[tuple[Path, bytes, int]]) -> None:
    """Write every ``(path, data, mode)`` to a temporary file next to it; only when all are
    written, rename each into place. On a failure nothing is replaced (temporaries removed)
    and the ``OSError`` names the file that failed."""
    done: list[tuple[Path, Path]] = []
    try:
        for path, data, mode in files:
            try:
                done.append((_tmp_file(path, data, mode), path))
            except OSError as exc:
                if exc.filename is None or str(exc.filename).endswith(".tmp"):
                    exc.filename = str(path)
                raise
        for _, path in done:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        backups: list[tuple[Path, Path]] = []
        try:
            for _, path in done:  # keep the old files until every new one is in place
                if path.exists():
                    bak = path.with_name(f".{path.name}.{os.getpid()}.bak")
                    os.link(path, bak)
                    backups.append((bak, path))
            for tmp, path in done:
                os.replace(tmp, path)
        except BaseException:
            for bak, path in backups:
                os.replace(bak, path)
            raise
        finally:
            for bak, _ in backups:
                bak.unlink(missing_ok=True)
    finally:
        for tmp, _ in done:
            tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: bytes | str, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (temporary name + rename), file mode ``mode``."""
    raw = data.encode() if isinstance(data, str) else data
    replace_all([(Path(path), raw, mode)])


RUN_MARKERS = ("summary.json", "results.json")
"""A folder holding one of these holds a previous run's results (``merkat sim run`` writes
``summary.json``, ``merkat sim experiment`` and ``merkat bench sweep`` ``results.json``): the
only kind of non-empty folder ``--force`` replaces."""


def prepare_out_dir(out: str | Path, *, force: bool = False, field: str = "--out") -> Path:
    """Check an output directory before a run (raises :class:`OutputError`): not a file, not
    the current folder nor one holding it, empty or absent (or, with ``force``, a previous
    run's results: never a folder of other files, which replacing it would delete), and its
    parent writable. Creates nothing."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{field}: {p} is a file, not a directory")
    here = Path.cwd().resolve()
    if p.resolve() == here or p.resolve() in here.parents:
        raise OutputError(f"{field}: {p} is the current folder or holds it (replacing it "
                          f"would delete it): give a new folder, e.g. {field} runs/easy")
    if p.is_dir() and any(p.iterdir()):
        if not force:
            raise OutputError(f"{field}: {p} is not empty (use --force to replace its results)")
        if not any((p / name).is_file() for name in RUN_MARKERS):
            raise OutputError(
                f"{field}: {p} is not empty and holds no previous run's results (no "
                f"{' or '.join(RUN_MARKERS)}): --force replaces only those; give a new folder"
            )
    parent = p.resolve().parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{field}: cannot write in {probe}")
    return p


@contextmanager
def output_dir(out: str | Path, *, force: bool = False, field: str = "--out") -> Iterator[Path]:
    """A fresh temporary directory beside ``out`` to write a run's files into; on success it
    replaces ``out`` (the previous results are removed only then); on failure or interrupt it
    is removed and ``out`` is left as it was."""
    p = prepare_out_dir(out, force=force, field=field)
    p.resolve().parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.resolve().parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        old: Path | None = None
        if p.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".old", dir=tmp.parent))
            os.replace(p, old / "d")
        os.replace(tmp, p)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
