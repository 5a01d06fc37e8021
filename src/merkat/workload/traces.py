"""Workload traces by name: the one that ships with merkat, the ones a user fetched from the
Parallel Workloads Archive, and folders of their own.

A trace is named by its file name without ``.swf``/``.swf.gz`` (``HPC2N-2002-2.2-cln``); the
file name itself and a path work too. :func:`find_trace` looks, in order:

1. at the argument as a path, if that file exists;
2. in ``$MERKAT_TRACES`` (a folder: the override, e.g. a shared copy on a cluster);
3. in the traces bundled with the package (``merkat/data/traces``: HPC2N-2002-2.2-cln, with
   the archive's acknowledgement in its README);
4. in the user cache (``<user cache dir>/merkat/traces``, where :func:`fetch` puts downloads;
   ``$XDG_CACHE_HOME`` moves it on Linux);
5. in ``shared/traces`` beside a development checkout (the layout of this project's CI).

:func:`fetch` downloads a trace of the archive by name (:data:`ARCHIVE` lists those whose
checksum merkat knows; ``url`` and ``sha256`` fetch any other), checks its SHA-256 and only then
moves it into the cache. The checksum is that of the SWF text, after decompression when the file
is gzipped (so a re-compressed copy still matches); the SHA-256 of the file as downloaded is
accepted too. Offline, :class:`FetchError` says where to put the file by hand.

This module does no work at import and imports nothing heavy (the CLI imports it at start-up).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HPC2N = "HPC2N-2002-2.2-cln.swf.gz"
HPC2N_NAME = "HPC2N-2002-2.2-cln"
LUBLIN_256 = "lublin_256.swf"

TRACES_ENV = "MERKAT_TRACES"
ARCHIVE_ENV = "MERKAT_ARCHIVE_URL"
ARCHIVE_URL = "https://www.cs.huji.ac.il/labs/parallel/workload/"
SUFFIXES = (".swf.gz", ".swf", ".gz")


@dataclass(frozen=True)
class ArchiveTrace:
    """A trace of the Parallel Workloads Archive whose content merkat can check."""

    name: str
    path: str  # under the archive's URL
    sha256: str  # of the SWF text (decompressed)
    jobs: int
    about: str


ARCHIVE: dict[str, ArchiveTrace] = {
    t.name: t
    for t in (
        ArchiveTrace(
            "HPC2N-2002-2.2-cln",
            "l_hpc2n/HPC2N-2002-2.2-cln.swf.gz",
            "77b8993c73ae438385f6c0015708251f52dc316267b03ac19a406fbea2802afa",
            202_871,
            "HPC2N Seth Linux cluster, 240 procs, 2002-2006 (bundled; the Themis papers' trace)",
        ),
        ArchiveTrace(
            "HPC2N-2002-2.1-cln",
            "l_hpc2n/HPC2N-2002-2.1-cln.swf.gz",
            "e2f6fb358e207aedac5cd1f9e30b7bf1198050cb2ef09abe6c050ab92fe9bf61",
            202_876,
            "the previous release of the same log (5 more jobs)",
        ),
        ArchiveTrace(
            "NASA-iPSC-1993-3.1-cln",
            "l_nasa_ipsc/NASA-iPSC-1993-3.1-cln.swf.gz",
            "9d997a2c20a7f7b0b6d81638d756ce8b2c524c4f2e9ec78da36001743ca33d76",
            18_239,
            "NASA Ames Intel iPSC/860, 128 nodes, 1993",
        ),
    )
}


class TraceNotFound(FileNotFoundError):
    """No trace of that name or path; the message says where merkat looked and what to do."""


class FetchError(Exception):
    """A download that failed or did not match its checksum (nothing was written)."""

    exit_code = 1


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
"""What :func:`fetch` takes as a trace's name (the archive's spelling, ``.swf``/``.swf.gz``
allowed): letters, digits, ``.``, ``_``, ``+``, ``-``, never ``/`` nor ``..`` (a path), never
empty or a control character (a file name of the cache)."""


def check_fetch_name(name: str) -> str:
    """``name`` if it can name a trace to fetch (:data:`NAME`), else :class:`ValueError`
    listing the valid names: ``../../etc/passwd`` was fetched as ``passwd``."""
    if NAME.fullmatch(name) and ".." not in name:
        return name
    known = sorted(set(ARCHIVE) | {t.name for t in local_traces() if NAME.fullmatch(t.name)})
    path = "/" in name or "\\" in name or ".." in name
    why = "empty" if not name.strip() else "a path" if path else "not a trace name"
    raise ValueError(f"NAME: {name!r} is {why}: a trace's name is letters, digits, '.', '_', "
                     f"'+' and '-' (no '/' or '..'); the traces: {', '.join(known)} (`merkat "
                     "traces list --archive`)")


def trace_name(path: str | Path) -> str:
    """A trace's name: its file name without ``.swf.gz``, ``.swf`` or ``.gz``."""
    name = Path(path).name
    for s in SUFFIXES:
        if name.endswith(s):
            return name[: -len(s)]
    return name


def bundled_dir() -> Path:
    """The traces shipped inside the package."""
    return Path(__file__).resolve().parents[1] / "data" / "traces"


def cache_dir() -> Path:
    """Where :func:`fetch` puts downloaded traces (the user cache, platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("merkat")) / "traces"


def checkout_dir() -> Path:
    """``shared/traces`` beside a development checkout (CI clones it there)."""
    return Path(__file__).resolve().parents[4] / "shared" / "traces"


def search_dirs() -> list[tuple[str, Path]]:
    """``(source, folder)`` searched for a trace given by name, in order."""
    dirs: list[tuple[str, Path]] = []
    env = os.environ.get(TRACES_ENV)
    if env:
        dirs.append((TRACES_ENV, Path(env)))
    dirs += [("bundled", bundled_dir()), ("cache", cache_dir()), ("checkout", checkout_dir())]
    return dirs


def _in(folder: Path, name: str) -> Path | None:
    base = trace_name(name)
    for candidate in (name, base + ".swf.gz", base + ".swf", base + ".gz"):
        p = folder / candidate
        if p.is_file():
            return p
    return None


def find_trace(name: str | Path) -> Path:
    """The file of trace ``name`` (a name, a file name or a path); :class:`TraceNotFound`
    naming the places searched and how to get the trace otherwise."""
    direct = Path(name)
    text = str(name)
    if not text.strip():
        raise TraceNotFound("empty: give a trace name (`merkat traces list`) or an SWF file")
    if "/" in text:
        if direct.is_file():
            return direct
        raise TraceNotFound(f"no such file: {text}")
    for source, d in search_dirs():
        found = _in(d, text)
        if found is not None:
            if direct.is_file() and direct.resolve() != found.resolve():
                # a bare name matching a file here and a trace there: never pick silently
                raise TraceNotFound(
                    f"trace {text!r} is ambiguous: ./{text} and {found} ({source}); write "
                    f"./{text} for the file here, or {found} for the other"
                )
            return found
    if direct.is_file():
        return direct
    searched = ", ".join(f"{d} ({src})" for src, d in search_dirs())
    hint = (
        f"`merkat traces fetch {trace_name(text)}` downloads it"
        if trace_name(text) in ARCHIVE
        else "`merkat traces list` shows the local traces"
    )
    raise TraceNotFound(
        f"trace {text!r} not found: not a file, and not in {searched}; {hint}, "
        f"or set {TRACES_ENV} to the folder holding it"
    )


@dataclass(frozen=True)
class LocalTrace:
    name: str
    path: Path
    source: str  # MERKAT_TRACES | bundled | cache | checkout


def local_traces() -> list[LocalTrace]:
    """Every trace file in the searched folders, the first of each name (the one
    :func:`find_trace` returns), in search order then by name."""
    seen: set[str] = set()
    out: list[LocalTrace] = []
    for source, d in search_dirs():
        if not d.is_dir():
            continue
        files = sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
        for p in files:
            name = trace_name(p)
            if name not in seen:
                seen.add(name)
                out.append(LocalTrace(name, p, source))
    return out


def count_jobs(path: Path) -> int:
    """The number of job lines of an SWF file (lines that are neither blank nor comments)."""
    opener = gzip.open if _is_gzip(path) else open
    n = 0
    with opener(path, "rb") as f:
        for line in f:
            s = line.lstrip()
            if s and not s.startswith(b";"):
                n += 1
    return n


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def archive_url(name: str) -> str:
    """Where the archive (or the mirror in ``$MERKAT_ARCHIVE_URL``) serves trace ``name``."""
    base = os.environ.get(ARCHIVE_ENV) or ARCHIVE_URL
    return base.rstrip("/") + "/" + ARCHIVE[name].path


def fetch(
    name: str,
    *,
    url: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    timeout: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> tuple[Path, bool]:
    """Download trace ``name`` into :func:`cache_dir`; return its path and whether it was
    downloaded (False: it was there already).

    ``name`` is one of :data:`ARCHIVE`, or any name with both ``url`` and ``sha256``. The file
    is written to a temporary file beside its destination, checked, then renamed: a failed or
    mismatching download leaves nothing behind. ``progress(done_bytes, total_or_None)`` is
    called as bytes arrive. Raises :class:`ValueError` for bad arguments (the message names the
    argument) and :class:`FetchError` when the download fails or its checksum does not match.
    """
    import urllib.error
    import urllib.request

    name = trace_name(check_fetch_name(name))
    if url is None:
        if name not in ARCHIVE:
            known = ", ".join(sorted(ARCHIVE))
            raise ValueError(
                f"NAME: {name!r} is not a trace merkat knows the checksum of (known: {known}); "
                "give --url and --sha256 to fetch another"
            )
        url = archive_url(name)
        sha256 = sha256 or ARCHIVE[name].sha256
    elif not sha256:
        raise ValueError("--sha256: required with --url (the download is checked against it)")
    sha256 = sha256.strip().lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"--sha256: expected 64 hexadecimal digits, got {sha256!r}")
    if not url.startswith(("http://", "https://", "file://")):
        raise ValueError(f"--url: expected an http(s):// or file:// URL, got {url!r}")
    folder = cache_dir()
    filename = name + (".swf.gz" if url.endswith(".gz") else ".swf")
    dest = folder / filename
    if dest.is_file() and not force:
        return dest, False
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"cannot create the cache folder {folder}: {exc.strerror}") from None
    fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=folder)
    tmp = Path(tmp_name)
    raw = hashlib.sha256()
    content = hashlib.sha256()
    inflate: zlib._Decompress | None = None
    try:
        with os.fdopen(fd, "wb") as out:
            req = urllib.request.Request(url, headers={"User-Agent": "merkat"})
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                length = resp.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                done = 0
                while chunk := resp.read(1 << 16):
                    if done == 0 and chunk[:2] == b"\x1f\x8b":
                        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out.write(chunk)
                    raw.update(chunk)
                    content.update(inflate.decompress(chunk) if inflate else chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
            if inflate is not None:
                content.update(inflate.flush())
        if sha256 not in (content.hexdigest(), raw.hexdigest()):
            raise FetchError(
                f"{url}: checksum mismatch (SHA-256 of the trace {content.hexdigest()}, "
                f"expected {sha256}); nothing was written"
            )
        os.replace(tmp, dest)
    except (urllib.error.URLError, OSError, zlib.error, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise FetchError(
            f"cannot download {name} from {url}: {reason}; to install it by hand, download "
            f"that file and put it at {dest} (or set {TRACES_ENV} to its folder)"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest, True
