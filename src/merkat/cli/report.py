"""``merkat report RUN --out FILE.html``: one self-contained HTML page for a run.

RUN is a ``merkat sim run`` or ``merkat sim experiment`` output folder, or a live server's
history: its database URL (``sqlite:///…/merkat.db``, ``postgresql://…``), its SQLite file or
its data folder (holding ``merkat.db``), over ``--since``/``--until``. Heavy imports
(matplotlib, numpy, sqlalchemy) happen inside the command.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import typer

from merkat.cli._common import EXIT_FAILURE, fail


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder, so a
    reader never sees half a page and a failure leaves any old file intact."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the page from a web server
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def live_url(run: str) -> str | None:
    """The database URL when RUN names a live server's history, else None (a folder)."""
    if "://" in run:
        return run
    p = Path(run)
    if p.is_file() and p.suffix in (".db", ".sqlite", ".sqlite3"):
        return f"sqlite:///{p.resolve()}"
    if p.is_dir() and (p / "merkat.db").is_file() and not (p / "results.json").exists():
        return f"sqlite:///{(p / 'merkat.db').resolve()}"
    return None


def _sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL (None for another database)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0].removeprefix("file:")
    return Path(path) if path and path != ":memory:" else None


def check_out(out: Path, run: str, url: str | None) -> None:
    """Exit 2 when writing ``out`` would replace what RUN is made of: the report only reads
    RUN (``--out data/merkat.db`` replaced a running server's database with the page, and
    ``--out run/summary.json`` the run's results). Inside the run's folder (the simulator's
    folder, or the one holding the database) ``out`` must be a new file or an ``.html`` page
    (``data/report.html``, as ``merkat demo`` writes it); the database file itself, never."""
    target = out.parent.resolve() / out.name  # (a link named --out is replaced, not followed)
    db = _sqlite_file(url) if url is not None else None
    folder = Path(run) if url is None else (db.parent if db is not None else None)
    if db is not None and target == db.resolve():
        fail(f"--out: {out} is the database the report reads; give a new file such as "
             "report.html")
    if folder is None or not folder.is_dir():
        return
    inside = target.parent == folder.resolve() or folder.resolve() in target.parents
    if inside and os.path.lexists(target) and target.suffix.lower() not in (".html", ".htm"):
        fail(f"--out: {out} is a file of {run} (the report only reads it); give a new file "
             "such as report.html")


def report_cmd(
    run: str = typer.Argument(
        ...,
        help="A `merkat sim run` / `merkat sim experiment` output folder, or a live server's "
        "database (URL, SQLite file, or the server's data folder).",
    ),
    out: Path = typer.Option(..., "--out", help="The HTML file to write."),
    since: str | None = typer.Option(
        None, "--since", help="Live history from: Unix seconds, ISO date-time, or 30m/2h/1d ago."
    ),
    until: str | None = typer.Option(None, "--until", help="Live history up to (same forms)."),
) -> None:
    """Write one self-contained HTML page (figures embedded, summary table, parameters)."""
    from merkat.cli.timespec import parse_time
    from merkat.report.html import render
    from merkat.report.model import ReportError
    from merkat.report.sources import load

    if out.is_dir():
        fail(f"--out: {out} is a folder; give a file name such as report.html")
    if not out.parent.is_dir():
        fail(f"--out: no such folder: {out.parent}")
    try:
        t0 = None if since is None else parse_time(since, "--since")
        t1 = None if until is None else parse_time(until, "--until")
    except ValueError as e:
        fail(str(e))
    if t0 is not None and t1 is not None and t1 < t0:
        fail("--until must not be before --since")
    url = live_url(run)
    check_out(out, run, url)
    if url is None and (since or until):
        fail("--since/--until apply to a live server's history, not to a simulator folder")
    try:
        if url is not None:
            from merkat.report.live import live_history

            report = live_history(url, t0, t1)
        else:
            report = load(Path(run))
    except ReportError as e:
        fail(str(e))
    try:
        write_atomic(out, render(report))
    except OSError as e:
        fail(f"--out: cannot write {out}: {e.strerror or e}", EXIT_FAILURE)
    print(out)
