"""A small index of trace files: name, jobs, span and SHA-256, without reading the traces.

``merkat traces list`` answers from it. Two indexes, one format (JSON, ``{"version": 1,
"traces": {FILE_NAME: entry}}``, an entry being :func:`describe`'s dict):

- the **bundled index**, ``merkat/data/traces/index.json``, shipped beside the bundled traces.
  It is written by ``python -m merkat.workload.trace_index`` and a test rebuilds it from the
  traces themselves and compares, so it cannot go stale;
- the **user index**, ``<user cache dir>/merkat/trace-index.json``, computed on first listing
  for every other trace (``$MERKAT_TRACES``, the cache, a checkout) and cached, keyed by the
  file's absolute path, size and modification time: a file that changes is described again.

An entry is used only if the file's size (and, for the user index, its mtime) still match;
otherwise the file is read again (and the user index updated). The user index is written
atomically (a temporary file renamed over it); an unreadable or corrupt one is ignored and
rebuilt, and one that cannot be written is not an error (the listing is just slower).

Entry fields: ``name``, ``jobs`` (job lines), ``first_submit_s`` / ``last_submit_s`` (the
smallest and largest submit time, SWF field 2, seconds; ``None`` without jobs), ``span_s``
(their difference), ``sha256`` (of the SWF text, decompressed if gzipped: the checksum
``merkat traces fetch`` checks), ``size`` (bytes of the file), ``mtime_ns`` (user index only).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from merkat.workload import traces as tr

VERSION = 1
INDEX_NAME = "index.json"


def bundled_index_path() -> Path:
    """The index shipped with the bundled traces."""
    return tr.bundled_dir() / INDEX_NAME


def user_index_path() -> Path:
    """The computed-and-cached index of the other traces (the user cache)."""
    return tr.cache_dir().parent / "trace-index.json"


def describe(path: Path) -> dict[str, Any]:
    """Read trace ``path`` once: its index entry (see the module docstring). Raises
    :class:`OSError` / :class:`EOFError` for an unreadable or truncated file."""
    opener: Any = gzip.open if tr._is_gzip(path) else open
    digest = hashlib.sha256()
    jobs = 0
    first: float | None = None
    last: float | None = None
    with opener(path, "rb") as f:
        for line in f:
            digest.update(line)
            s = line.lstrip()
            if not s or s.startswith(b";"):
                continue
            jobs += 1
            fields = s.split(None, 2)
            try:
                submit = float(fields[1])
            except (IndexError, ValueError):
                continue
            if first is None or submit < first:
                first = submit
            if last is None or submit > last:
                last = submit
    return {
        "name": tr.trace_name(path),
        "jobs": jobs,
        "first_submit_s": _num(first),
        "last_submit_s": _num(last),
        "span_s": _num(last - first) if first is not None and last is not None else None,
        "sha256": digest.hexdigest(),
        "size": path.stat().st_size,
    }


def _num(x: float | None) -> int | float | None:
    return int(x) if x is not None and x == int(x) else x


def _load(path: Path) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return {}
    entries = doc.get("traces")
    return entries if isinstance(entries, dict) else {}


def _dump(entries: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"version": VERSION, "traces": entries}, indent=2, sort_keys=True) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_bundled() -> dict[str, dict[str, Any]]:
    """The bundled index as it should be: every bundled trace read and described."""
    d = tr.bundled_dir()
    files = sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(tr.SUFFIXES))
    return {p.name: describe(p) for p in files}


def write_bundled() -> Path:
    """Rebuild and write the bundled index (run after adding or changing a bundled trace)."""
    path = bundled_index_path()
    _write_atomic(path, _dump(build_bundled()))
    return path


class Index:
    """The entries of the local traces, from the two indexes, reading only files that are
    missing from them or changed; :meth:`save` writes back what was computed."""

    def __init__(self) -> None:
        self.bundled = _load(bundled_index_path())
        self.user_path = user_index_path()
        self.user = _load(self.user_path)
        self.dirty = False

    def entry(self, t: tr.LocalTrace) -> dict[str, Any]:
        """``t``'s entry (read the file if no valid entry is indexed). Raises
        :class:`OSError` / :class:`EOFError` if it must be read and cannot be."""
        st = t.path.stat()
        if t.source == "bundled":
            e = self.bundled.get(t.path.name)
            if isinstance(e, dict) and e.get("size") == st.st_size:
                return e
        key = str(t.path.resolve())
        e = self.user.get(key)
        if isinstance(e, dict) and e.get("size") == st.st_size and e.get("mtime_ns") == (
            st.st_mtime_ns
        ):
            return e
        e = describe(t.path)
        e["mtime_ns"] = st.st_mtime_ns
        self.user[key] = e
        self.dirty = True
        return e

    def save(self) -> None:
        """Write the user index if an entry was computed (best effort: a read-only cache is
        not an error)."""
        if not self.dirty:
            return
        self.user = {k: e for k, e in self.user.items() if Path(k).is_file()}
        with contextlib.suppress(OSError):
            _write_atomic(self.user_path, _dump(self.user))
        self.dirty = False


if __name__ == "__main__":  # pragma: no cover - the maintainer's command
    print(write_bundled())
