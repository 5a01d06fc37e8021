"""Where reports come from: a run folder of the simulator, or a live server's history.

:func:`load` looks at RUN and picks the source: a folder with ``summary.json`` and ``jobs.csv``
is a ``merkat sim run`` output (figures drawn by :func:`merkat.sim.plots.plot_run`, into a
temporary folder: the run folder is only read); a folder with ``results.json`` is a
``merkat sim experiment`` output (its figure embedded as written, or redrawn from
``results.json`` if the PNG is missing). The live server's history is
:mod:`merkat.report.live`. matplotlib is imported only here, when a figure is drawn.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from merkat.report.model import Figure, Report, ReportError, Table

# Keys of summary.json that say what ran (parameters), not what came out.
RUN_PARAMETERS = (
    "scheduler",
    "policy",
    "trace",
    "cluster",
    "jobs_limit",
    "skip",
    "interarrival_factor",
    "seed",
    "period_s",
    "workers",
)
_RUN_HIDDEN = ("pieces", "bad_lines", "dropped_by_reason")
_FIGURE_CAPTIONS = {
    "queue_length.png": "Waiting jobs over time",
    "utilization.png": "Busy cores / total cores over time",
    "wait_times.png": "Distribution of waiting times",
}
_LONG = 8  # lists longer than this are summarised in table cells


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot read: {e}") from None


def _short(v: Any) -> Any:
    if isinstance(v, (list, tuple)) and len(v) > _LONG:
        return f"[{len(v)} values]"
    return v


def dict_rows_table(caption: str, rows: list[dict[str, Any]]) -> Table:
    """A table of JSON objects: the union of their keys (first-seen order) as columns."""
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    cols = tuple(columns)
    return Table(caption, cols, tuple(tuple(_short(r.get(c)) for c in cols) for r in rows))


def sim_run(folder: Path) -> Report:
    """The report of a ``merkat sim run`` output folder."""
    summary = _read_json(folder / "summary.json")
    if not isinstance(summary, dict):
        raise ReportError(f"{folder / 'summary.json'}: expected a JSON object")
    params = {k: summary[k] for k in RUN_PARAMETERS if k in summary}
    results = [
        (k, v)
        for k, v in summary.items()
        if k not in params and k not in _RUN_HIDDEN and not isinstance(v, (dict, list))
    ]
    tables = [Table("Summary", ("metric", "value"), tuple(results), numeric=False)]
    dropped = summary.get("dropped_by_reason") or {}
    if dropped:
        tables.append(Table("Dropped jobs", ("reason", "jobs"), tuple(dropped.items())))
    notes = []
    if summary.get("skipped_lines"):
        notes.append(
            f"{summary['skipped_lines']} bad trace line(s) skipped; first: "
            f"{(summary.get('bad_lines') or [''])[0]}"
        )
    from merkat.sim.plots import plot_run

    figures = []
    with tempfile.TemporaryDirectory(prefix="merkat-report-") as tmp:
        try:
            paths = plot_run(folder, tmp)
        except (KeyError, ValueError, IndexError) as e:
            raise ReportError(f"{folder / 'jobs.csv'}: cannot plot: {e}") from None
        for p in paths:
            figures.append(Figure(_FIGURE_CAPTIONS.get(p.name, p.stem), p.read_bytes()))
    title = f"Simulation: {summary.get('scheduler', '?')} on {Path(str(summary.get('trace', '?'))).name}"
    return Report("sim-run", title, params, tables, figures, notes)


def sim_experiment(folder: Path) -> Report:
    """The report of a ``merkat sim experiment`` output folder."""
    path = folder / "results.json"
    doc = _read_json(path)
    if not isinstance(doc, dict) or "experiment" not in doc:
        raise ReportError(f"{path}: not an experiment's results (no 'experiment' field)")
    name = str(doc["experiment"])
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise ReportError(f"{path}: 'parameters' must be an object, got {_kind(params)}")
    params = dict(params)
    tables: list[Table] = []
    for key, value in doc.items():
        if key in ("parameters", "runs", "markdown"):
            continue
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            tables.append(dict_rows_table(key.replace("_", " ").capitalize(), value))
        elif isinstance(value, dict) and value:
            tables.append(Table(key.capitalize(), ("metric", "value"), tuple(value.items())))
    runs = doc.get("runs") or []
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ReportError(f"{path}: 'runs' must be a list of objects (one per simulation)")
    if runs:
        tables.append(dict_rows_table("All runs (one row per simulation)", runs))
    figures = []
    # the experiment's own figure, NAME.png in the folder: a name that is no plain file name
    # ('../x', '/x', a NUL) names nothing in it (the other PNGs are still shown)
    plain = name and "/" not in name and "\x00" not in name and not name.startswith(".")
    png = folder / f"{name}.png" if plain else None
    if png is not None and png.is_file():
        figures.append(Figure(str(doc.get("title", name)), png.read_bytes()))
    else:
        figures += _redraw(name, doc, path)
    for other in sorted(folder.glob("*.png")):
        if other != png:
            figures.append(Figure(other.stem, other.read_bytes()))
    notes = [f"Paper: {doc['paper_claim']}"] if doc.get("paper_claim") else []
    return Report("sim-experiment", str(doc.get("title", name)), params, tables, figures, notes)


def _redraw(name: str, doc: dict[str, Any], path: Path) -> list[Figure]:
    """The experiment's figure drawn again from ``doc`` (its PNG is missing). A document
    without what the figure reads (an edited or truncated results.json) is a one-line
    error naming the file and what is missing (it was KeyError, an internal error)."""
    from merkat.experiments import EXPERIMENTS

    if name not in EXPERIMENTS:
        return []
    exp = EXPERIMENTS.get(name)
    with tempfile.TemporaryDirectory(prefix="merkat-report-") as tmp:
        out = Path(tmp) / f"{name}.png"
        try:
            exp.plot(doc, out)
        except KeyError as e:
            raise ReportError(f"{path}: cannot draw {name}'s figure: no {e} in it") from None
        except (TypeError, ValueError, IndexError, AttributeError) as e:
            raise ReportError(f"{path}: cannot draw {name}'s figure from it: "
                              f"{type(e).__name__}: {e}") from None
        return [Figure(str(doc.get("title", name)), out.read_bytes())]


def _kind(v: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean"}.get(type(v), type(v).__name__)


def load(run: Path) -> Report:
    """The report of RUN, a simulator output folder (see the module docstring)."""
    if not run.exists():
        raise ReportError(f"RUN: no such file or folder: {run}")
    if not run.is_dir():
        raise ReportError(f"RUN: {run} is not a folder (a sim run or sim experiment output)")
    if (run / "results.json").is_file():
        return sim_experiment(run)
    if (run / "summary.json").is_file() and (run / "jobs.csv").is_file():
        return sim_run(run)
    raise ReportError(
        f"RUN: {run} has neither results.json (sim experiment) nor summary.json + jobs.csv "
        "(sim run)"
    )
