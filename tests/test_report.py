"""``merkat report RUN --out FILE.html`` on simulator outputs: one page, figures embedded."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.experiments import run_experiment
from merkat.workload.lublin import write as write_lublin

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """The images, tables (as lists of rows of cell texts) and outside references of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[bytes] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.external: list[str] = []
        self._h2 = ""
        self._in_h2 = False
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._current: list[list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            src = a.get("src") or ""
            assert src.startswith("data:image/png;base64,"), src[:40]
            self.images.append(base64.b64decode(src.split(",", 1)[1]))
        for key in ("href", "src"):
            v = a.get(key) or ""
            if v.startswith(("http:", "https:", "//")):
                self.external.append(v)
        if tag == "h2":
            self._in_h2, self._h2 = True, ""
        elif tag == "table":
            self._current = self.tables.setdefault(self._h2, [])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self._in_h2 = False
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._current is not None and self._row is not None:
            self._current.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self._h2 += data
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def report(run: Path, out: Path) -> tuple[int, str, str]:
    r = runner.invoke(app, ["report", str(run), "--out", str(out)])
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def fig5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fig5")
    run_experiment("themis-fig5", out, jobs=30, factors=(1.0,))
    return out


def test_report_on_themis_fig5(fig5: Path, tmp_path: Path) -> None:
    out = tmp_path / "fig5.html"
    code, stdout, _ = report(fig5, out)
    assert code == 0 and stdout.strip() == str(out)
    page = parse(out)
    doc = json.loads((fig5 / "results.json").read_text())
    # The figure is the experiment's PNG, byte for byte.
    assert page.images == [(fig5 / "themis-fig5.png").read_bytes()]
    assert page.external == []
    rows = page.tables["Rows"]
    assert rows[0][:2] == ["interarrival_factor", "scheduler"]
    assert sorted(r[1] for r in rows[1:]) == ["edf", "fcfs", "market"]
    col = rows[0].index("met_deadlines_pct")
    market = next(r for r in rows[1:] if r[1] == "market")
    want = next(r for r in doc["rows"] if r["scheduler"] == "market")["met_deadlines_pct"]
    assert float(market[col]) == pytest.approx(want, rel=1e-3)
    assert "Efficiency" in page.tables
    params = dict((r[0], r[1]) for r in page.tables["Parameters"][1:])
    assert params["jobs"] == "30" and params["policy"] == "vertical-deadline"
    assert len(page.tables["All runs (one row per simulation)"]) == 1 + 3


def test_experiment_figure_redrawn_when_missing(fig5: Path, tmp_path: Path) -> None:
    run = tmp_path / "copy"
    run.mkdir()
    (run / "results.json").write_bytes((fig5 / "results.json").read_bytes())
    code, _, _ = report(run, tmp_path / "r.html")
    assert code == 0
    (img,) = parse(tmp_path / "r.html").images
    assert img.startswith(PNG)


def test_report_on_sim_run(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    write_lublin(trace, 60, seed=3, nodes=32)
    run = tmp_path / "run"
    r = runner.invoke(
        app, ["sim", "run", "--trace", str(trace), "--scheduler", "market", "--out", str(run)]
    )
    assert r.exit_code == 0, r.stderr
    before = sorted(p.name for p in run.iterdir())
    code, _, _ = report(run, tmp_path / "run.html")
    assert code == 0
    assert sorted(p.name for p in run.iterdir()) == before  # the run folder is only read
    page = parse(tmp_path / "run.html")
    assert len(page.images) == 3 and all(i.startswith(PNG) for i in page.images)
    summary = json.loads((run / "summary.json").read_text())
    metrics = dict((r[0], r[1]) for r in page.tables["Summary"][1:])
    assert metrics["jobs"] == str(summary["jobs"]) == "60"
    assert metrics["met_deadlines"] == str(summary["met_deadlines"])
    params = dict((r[0], r[1]) for r in page.tables["Parameters"][1:])
    assert params["scheduler"] == "market" and params["seed"] == "0"
    assert '"total_cores": 32' in params["cluster"]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "no such file or folder"),
        (lambda d: d.mkdir(), "neither results.json"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text("{oops")), "results.json:1"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text("[]")), "not an experiment"),
        # valid JSON of the wrong shape: internal errors (TypeError, ValueError, KeyError)
        (lambda d: (d.mkdir(), (d / "results.json").write_text(
            '{"experiment": "x", "parameters": [1, 2]}')), "'parameters' must be an object"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(
            '{"experiment": "x", "runs": [{"a": 1}, 5]}')), "'runs' must be a list of objects"),
        (lambda d: (d.mkdir(), (d / "results.json").write_text(
            '{"experiment": "themis-fig5", "rows": []}')),
         "cannot draw themis-fig5's figure: no 'efficiency' in it"),
    ],
)
def test_bad_run_is_one_line_exit_2(tmp_path: Path, setup, message) -> None:  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    setup(run)
    code, _, err = report(run, tmp_path / "x.html")
    assert code == 2
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.html").exists()


def test_bad_out_is_exit_2(fig5: Path, tmp_path: Path) -> None:
    code, _, err = report(fig5, tmp_path / "missing" / "x.html")
    assert code == 2 and "--out: no such folder" in err
    code, _, err = report(fig5, tmp_path)
    assert code == 2 and "is a folder" in err


@pytest.mark.parametrize("name", ["results.json", "themis-fig5.png"])
def test_out_never_replaces_a_file_of_the_run(fig5: Path, name: str) -> None:
    """``--out RUN/results.json`` replaced the run's results with the page (exit 0): the run
    folder is only read. A page in it (``RUN/report.html``) is allowed."""
    before = (fig5 / name).read_bytes()
    code, _, err = report(fig5, fig5 / name)
    assert code == 2 and err.strip() == (
        f"error: --out: {fig5 / name} is a file of {fig5} (the report only reads it); give a "
        "new file such as report.html")
    assert (fig5 / name).read_bytes() == before
    code, _, err = report(fig5, fig5 / "report.html")
    assert code == 0, err
    (fig5 / "report.html").unlink()


def test_an_experiment_name_reads_no_file_outside_the_run(tmp_path: Path) -> None:
    """``{"experiment": "../secret"}`` embedded ``../secret.png``, a file outside the run."""
    (tmp_path / "secret.png").write_bytes(PNG)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text('{"experiment": "../secret"}')
    code, _, err = report(run, tmp_path / "x.html")
    assert code == 0, err
    assert parse(tmp_path / "x.html").images == []
