"""Standard Workload Format (SWF) reader and writer.

An SWF file is a text file of job lines, each with the 18 whitespace-separated fields below, and
header lines starting with ``;`` (``; MaxProcs: 240``). ``-1`` means "missing". Files ending in
``.gz`` are (de)compressed transparently.

Contract of :func:`read_swf`:

- returns an :class:`SwfTrace`: the header as a ``{key: value}`` dict (values are stripped
  strings; repeated keys such as ``Note`` are joined with a newline), and the job fields as one
  ``float64`` array per field (columnar, ``trace.field("run_time")`` or ``trace.data[:, 3]``);
- a job line must have exactly 18 numeric, finite fields. Otherwise it is *bad*: with
  ``strict=True`` a :class:`SwfError` naming ``file:line`` is raised; by default the line is skipped,
  counted in ``trace.skipped`` and its first few locations kept in ``trace.bad_lines``;
- speed: the whole job buffer is parsed by numpy's C reader (``numpy.loadtxt``) in one call
  (HPC2N, 202,871 jobs: about 0.8 s); only when that fast path finds a problem is the file
  re-read line by line to name the bad lines; a large clean trace is parsed once per file
  version and then loaded from the parsed-trace cache (:mod:`merkat.workload.swf_cache`).
"""

from __future__ import annotations

import gzip
import io
import warnings
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

FIELDS: tuple[str, ...] = (
    "job_id",  # 1
    "submit_time",  # 2
    "wait_time",  # 3
    "run_time",  # 4
    "allocated_procs",  # 5
    "avg_cpu_time",  # 6
    "used_memory",  # 7  KB per processor
    "requested_procs",  # 8
    "requested_time",  # 9
    "requested_memory",  # 10 KB per processor
    "status",  # 11
    "user_id",  # 12
    "group_id",  # 13
    "executable",  # 14
    "queue",  # 15
    "partition",  # 16
    "preceding_job",  # 17
    "think_time",  # 18
)
NFIELDS = len(FIELDS)
_INDEX = {name: i for i, name in enumerate(FIELDS)}
MAX_BAD_LINES_KEPT = 20


class SwfError(ValueError):
    """A malformed SWF file; the message names ``file:line`` and the problem."""


@dataclass
class SwfTrace:
    """A parsed SWF file: header dict, job fields as an ``(n, 18)`` float64 array."""

    header: dict[str, str]
    data: npt.NDArray[np.float64]
    path: str = "<memory>"
    skipped: int = 0
    bad_lines: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def field(self, name: str) -> npt.NDArray[np.float64]:
        """The column of field ``name`` (one of :data:`FIELDS`), a view of :attr:`data`."""
        try:
            return self.data[:, _INDEX[name]]
        except KeyError:
            raise KeyError(f"unknown SWF field {name!r}; known: {', '.join(FIELDS)}") from None

    def machine_size(self) -> int | None:
        """The header's MaxProcs, else MaxNodes, if positive; else None."""
        for key in ("MaxProcs", "MaxNodes"):
            value = self.header_int(key)
            if value is not None and value > 0:
                return value
        return None

    def header_int(self, key: str) -> int | None:
        """Header ``key`` as an int, or None when absent or not an integer."""
        value = self.header.get(key)
        if value is None:
            return None
        try:
            return int(value.split()[0])
        except (ValueError, IndexError):
            return None


MAX_TRACE_BYTES = 2**30
"""Largest (decompressed) trace accepted (the archive traces are at most a few hundred MiB); a
gzip bomb is stopped here instead of filling the memory."""


def _open_bytes(path: Path, limit: int | None = None) -> bytes:
    """The trace's bytes: gzip data (by its magic number, whatever the file's name) is
    decompressed, at most ``limit`` bytes (:data:`MAX_TRACE_BYTES`) either way."""
    most = MAX_TRACE_BYTES if limit is None else limit
    with path.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else path.open("rb") as f:
        chunks: list[bytes] = []
        size = 0
        while chunk := f.read(1 << 22):
            size += len(chunk)
            if size > most:
                what = "decompresses to" if gz else "is"
                raise SwfError(f"{path}: {what} more than {most // 2**20} MiB: not a trace")
            chunks.append(chunk)
    return b"".join(chunks)


def _parse_header_line(line: str, header: dict[str, str]) -> None:
    text = line[1:].strip()
    if ":" not in text:
        return
    key, _, value = text.partition(":")
    key, value = key.strip(), value.strip()
    if not key or " " in key:
        return
    header[key] = f"{header[key]}\n{value}" if key in header else value


def read_swf(path: str | Path, strict: bool = False) -> SwfTrace:
    """Read the SWF file ``path`` (``.gz`` transparently). See the module docstring."""
    from merkat.workload import swf_cache

    p = Path(path)
    try:
        kept = swf_cache.load(p)
    except ValueError as e:  # the cache's setting: bad input, as the trace's own
        raise SwfError(str(e)) from None
    if kept is not None:
        return SwfTrace(header=kept[0], data=kept[1], path=str(p))
    try:
        raw = _open_bytes(p)
    except OSError as e:
        raise SwfError(f"{p}: cannot read: {e.strerror or e}") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise SwfError(f"{p}: not a valid gzip file: {e or 'truncated'}") from None
    if not raw.strip():
        raise SwfError(f"{p}: empty file, not an SWF trace")
    head = raw[:4096]
    if b"\x00" in head or head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise SwfError(f"{p}: binary data (or UTF-16 text), not an SWF trace (ASCII text)")
    trace = parse_swf(raw, name=str(p), strict=strict)
    if len(trace) == 0 and trace.skipped:
        raise SwfError(f"{p}: no job records ({trace.skipped} bad lines; first: "
                       f"{trace.bad_lines[0] if trace.bad_lines else '?'})")
    swf_cache.store(p, trace.header, trace.data, trace.skipped)
    return trace


def parse_swf(raw: bytes, name: str = "<memory>", strict: bool = False) -> SwfTrace:
    """Parse SWF bytes; ``name`` is used in error messages. See :func:`read_swf`."""
    header: dict[str, str] = {}
    # Leading header block: consecutive lines that start with ';' (or are blank).
    pos = 0
    n = len(raw)
    header_lines = 0
    while pos < n:
        end = raw.find(b"\n", pos)
        end = n if end < 0 else end
        line = raw[pos:end]
        stripped = line.strip()
        if stripped and not stripped.startswith(b";"):
            break
        if stripped:
            _parse_header_line(stripped.decode("utf-8", "replace"), header)
        header_lines += 1
        pos = end + 1
    body = raw[pos:]
    data = _fast_parse(body)
    if data is not None:
        return SwfTrace(header=header, data=data, path=name)
    return _slow_parse(body, header, header_lines, name, strict)


def _fast_parse(body: bytes) -> npt.NDArray[np.float64] | None:
    """Parse the job block with numpy's C reader in one call; None if any line is not 18 finite
    numbers (the caller then re-reads line by line to name the bad lines)."""
    if b";" in body:
        return None  # comments further down: let the line parser handle them
    if not body.strip():
        return np.zeros((0, NFIELDS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.loadtxt(io.BytesIO(body), dtype=np.float64, ndmin=2)
        except (ValueError, UserWarning):
            return None
    if values.shape[1] != NFIELDS or not np.isfinite(values).all():
        return None
    return values


def _slow_parse(
    body: bytes, header: dict[str, str], first_line: int, name: str, strict: bool
) -> SwfTrace:
    rows: list[list[float]] = []
    skipped = 0
    bad: list[str] = []
    for offset, raw_line in enumerate(io.BytesIO(body)):
        lineno = first_line + offset + 1
        text = raw_line.decode("utf-8", "replace").strip()
        if not text:
            continue
        if text.startswith(";"):
            _parse_header_line(text, header)
            continue
        problem = _line_problem(text)
        if problem is None:
            rows.append([float(x) for x in text.split()])
            continue
        message = f"{name}:{lineno}: {problem}"
        if strict:
            raise SwfError(message)
        skipped += 1
        if len(bad) < MAX_BAD_LINES_KEPT:
            bad.append(message)
    data = np.array(rows, dtype=np.float64).reshape(len(rows), NFIELDS)
    return SwfTrace(header=header, data=data, path=name, skipped=skipped, bad_lines=bad)


def _line_problem(text: str) -> str | None:
    parts = text.split()
    if len(parts) != NFIELDS:
        return f"expected {NFIELDS} fields, found {len(parts)}"
    for i, tok in enumerate(parts):
        try:
            v = float(tok)
        except ValueError:
            return f"field {i + 1} ({FIELDS[i]}) is not a number: {tok!r}"
        if v != v or v in (float("inf"), float("-inf")):
            return f"field {i + 1} ({FIELDS[i]}) is not finite: {tok!r}"
    return None


def _format_value(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def format_swf(header: dict[str, str], rows: Iterable[Iterable[float]]) -> str:
    """SWF text: ``; Key: value`` header lines (multi-line values repeat the key), then rows.

    Integral values are written without a decimal point, others with ``repr`` (round-trips).
    """
    out: list[str] = []
    for key, value in header.items():
        for part in str(value).split("\n"):
            out.append(f"; {key}: {part}")
    for row in rows:
        vals = list(row)
        if len(vals) != NFIELDS:
            raise ValueError(f"an SWF row has {NFIELDS} fields, got {len(vals)}")
        out.append(" ".join(_format_value(float(v)) for v in vals))
    return "\n".join(out) + "\n"


def write_swf(
    path: str | Path, header: dict[str, str], data: npt.NDArray[np.float64] | list[list[float]]
) -> None:
    """Write an SWF file (gzip-compressed if ``path`` ends in ``.gz``) that :func:`read_swf`
    reads back to the same header and data."""
    text = format_swf(header, np.asarray(data, dtype=np.float64).reshape(-1, NFIELDS).tolist())
    p = Path(path)
    if p.suffix == ".gz":
        # mtime=0: the same content gives the same bytes.
        with open(p, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as f:
            f.write(text.encode())
    else:
        p.write_text(text)


def empty_row() -> list[float]:
    """An SWF row with every field missing (-1)."""
    return [-1.0] * NFIELDS
