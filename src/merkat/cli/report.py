"""``merkat report RUN --out FILE.html``: one self-contained HTML page for a run.

RUN is a ``merkat sim run`` or ``merkat sim experiment`` output folder. Heavy imports
(matplotlib, numpy) happen inside the command.
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


def report_cmd(
    run: Path = typer.Argument(
        ..., help="A `merkat sim run` or `merkat sim experiment` output folder."
    ),
    out: Path = typer.Option(..., "--out", help="The HTML file to write."),
) -> None:
    """Write one self-contained HTML page (figures embedded, summary table, parameters)."""
    from merkat.report.html import render
    from merkat.report.model import ReportError
    from merkat.report.sources import load

    if out.is_dir():
        fail(f"--out: {out} is a folder; give a file name such as report.html")
    if not out.parent.is_dir():
        fail(f"--out: no such folder: {out.parent}")
    try:
        report = load(run)
    except ReportError as e:
        fail(str(e))
    try:
        write_atomic(out, render(report))
    except OSError as e:
        fail(f"--out: cannot write {out}: {e.strerror or e}", EXIT_FAILURE)
    print(out)
