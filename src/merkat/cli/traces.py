"""``merkat traces list|fetch``: the workload traces merkat can use by name.

``list`` shows the bundled, cached and ``$MERKAT_TRACES`` traces with their job counts, spans
and checksums, from a small index rather than by reading every trace
(:mod:`merkat.workload.trace_index`; ``-o json``: ``{"items": [{"name", "jobs", "span_s",
"sha256", "path", "source"}]}``); ``--archive`` adds the archive's traces that ``fetch`` can
download (``path`` and ``span_s`` null until fetched). ``fetch NAME``
downloads one into the user cache and checks its SHA-256 (:mod:`merkat.workload.traces`).
"""

from __future__ import annotations

import time
from typing import Any

import typer

from merkat.cli._common import (
    EXIT_FAILURE,
    OutputFormat,
    OutputOption,
    emit,
    err_console,
    fail,
    print_table,
)
from merkat.workload import traces as tr

app = typer.Typer(
    help="Workload traces: the bundled one, the ones fetched from the archive.",
    no_args_is_help=True,
)


@app.command("list")
def list_cmd(
    archive: bool = typer.Option(
        False, "--archive", help="Also list the archive's traces `fetch` can download."
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Traces usable by name with --trace: bundled, cached, in $MERKAT_TRACES."""
    from merkat.workload.trace_index import Index

    index = Index()
    items: list[dict[str, Any]] = []
    for t in tr.local_traces():
        e: dict[str, Any] = {}
        try:
            e = index.entry(t)
        except (OSError, EOFError, ValueError) as exc:  # a truncated download, unreadable
            err_console().print(f"warning: {t.path}: cannot read: {exc}", markup=False)
        items.append({
            "name": t.name, "jobs": e.get("jobs"), "span_s": e.get("span_s"),
            "sha256": e.get("sha256"), "path": str(t.path), "source": t.source,
        })
    index.save()
    if archive:
        local = {i["name"] for i in items}
        for a in tr.ARCHIVE.values():
            if a.name not in local:
                items.append({"name": a.name, "jobs": a.jobs, "span_s": None,
                              "sha256": a.sha256, "path": None, "source": "archive"})
    cols = ["name", "jobs", "span", "sha256", "source", "path"]
    rows = [
        [i["name"], i["jobs"], _days(i["span_s"]), (i["sha256"] or "")[:12], i["source"],
         i["path"]]
        for i in items
    ]
    emit(output, {"items": items}, lambda: print_table(None, cols, rows))


def _days(span_s: float | None) -> str:
    """A span in days for the table ("" if unknown)."""
    return "" if span_s is None else f"{span_s / 86400:,.1f} d"


@app.command("fetch")
def fetch_cmd(
    name: str = typer.Argument(..., help="A trace of the archive, e.g. NASA-iPSC-1993-3.1-cln."),
    url: str | None = typer.Option(
        None, "--url", help="Download from this URL instead (any trace; needs --sha256)."
    ),
    sha256: str | None = typer.Option(
        None, "--sha256", help="Expected SHA-256 (of the SWF text, or of the file as served)."
    ),
    force: bool = typer.Option(False, "--force", help="Download again even if cached."),
    output: OutputFormat = OutputOption,
) -> None:
    """Download a trace of the Parallel Workloads Archive into the user cache (checksum
    checked); print its path. $MERKAT_ARCHIVE_URL names a mirror of the archive."""
    try:  # a path (../../etc/passwd), empty or control characters: not a name
        base = tr.trace_name(tr.check_fetch_name(name))
    except ValueError as exc:
        fail(str(exc))
    if url is None and not force:
        try:
            existing = tr.find_trace(base)
        except FileNotFoundError:
            existing = None
        if existing is not None and existing.parent == tr.bundled_dir():
            _done(output, base, existing, "bundled with merkat: nothing to fetch")
            return
    bar = _Bar(base)
    try:
        path, downloaded = tr.fetch(base, url=url, sha256=sha256, force=force, progress=bar)
    except ValueError as exc:
        fail(str(exc))
    except tr.FetchError as exc:
        fail(str(exc), EXIT_FAILURE)
    finally:
        bar.close()
    _done(output, base, path, "downloaded, checksum ok" if downloaded else "already in the cache")


def _done(output: OutputFormat, name: str, path: Any, status: str) -> None:
    data = {"name": name, "path": str(path), "status": status}
    emit(output, data, lambda: print(path))
    if output is not OutputFormat.json:
        err_console().print(f"{name}: {status}", markup=False, highlight=False)


class _Bar:
    """A download bar on stderr, shown once the download has lasted half a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.t0 = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int | None) -> None:
        if self.bar is None:
            if time.perf_counter() - self.t0 < 0.5:
                return
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TransferSpeedColumn,
            )

            self.bar = Progress(
                TextColumn(self.label),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=err_console(),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
