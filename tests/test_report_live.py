"""``merkat report`` on a live server's history: a real manager runs a platform on the local
backend (no cgroups needed), then the report reads its database over a time range."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.cli.timespec import parse_time
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse
from test_report import PNG
from test_report import parse as parse_page

runner = CliRunner()
SOLVER = """\
name: solver
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: "for i in $(seq 1 4); do echo iteration $i/4; sleep 0.05; done"
    cpu: 1
    memory: 64
    monitor: {kind: log, regex: 'iteration (?P<work_done>\\\\d+)/(?P<work_total>\\\\d+)'}
"""


@pytest.fixture(scope="module")
def live_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float, float]:
    data = tmp_path_factory.mktemp("live")
    cfg = load_config(None, data_dir=data, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(data / "no-cgroups")})  # fmt: skip
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    t0 = time.time()
    m.submit("alice", parse(SOLVER))
    m.admit()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        m.tick()
        if store.platform("solver").state == "finished":  # type: ignore[union-attr]
            break
        time.sleep(0.2)
    m.tick()
    t1 = time.time()
    m.close()
    store.close()
    return data, t0, t1


def test_report_of_a_live_run(live_db: tuple[Path, float, float], tmp_path: Path) -> None:
    data, t0, t1 = live_db
    out = tmp_path / "live.html"
    r = runner.invoke(app, ["report", str(data), "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    page = parse_page(out)
    assert len(page.images) == 3 and all(i.startswith(PNG) for i in page.images)
    (header, row) = page.tables["Platforms"]
    cells = dict(zip(header, row, strict=True))
    assert cells["platform"] == "solver" and cells["state"] == "finished"
    assert float(cells["charged in range"]) > 0
    kinds = dict(page.tables["Events by kind"][1:])
    assert kinds["submitted"] == "1" and kinds["admitted"] == "1"
    params = dict(page.tables["Parameters"][1:])
    assert int(params["periods"]) >= 2
    # A range before the run holds nothing: a one-line error, exit 2.
    r = runner.invoke(app, ["report", str(data / "merkat.db"), "--out", str(out),
                            "--until", str(t0 - 3600)])  # fmt: skip
    assert r.exit_code == 2 and "no period and no event in the range" in r.stderr
    # A range that cuts the run: fewer periods.
    mid = (t0 + t1) / 2
    r = runner.invoke(app, ["report", f"sqlite:///{data / 'merkat.db'}", "--out", str(out),
                            "--since", str(mid)])  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert int(dict(parse_page(out).tables["Parameters"][1:])["periods"]) < int(params["periods"])


def test_report_errors_on_a_non_server_database(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    r = runner.invoke(app, ["report", str(db), "--out", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "not a merkat server database" in r.stderr
    r = runner.invoke(app, ["report", "sqlite:///" + str(tmp_path / "none.db"), "--out",
                            str(tmp_path / "x.html")])  # fmt: skip
    assert r.exit_code == 2 and "no such database file" in r.stderr
    assert not (tmp_path / "none.db").exists()
    r = runner.invoke(app, ["report", str(db), "--out", str(tmp_path / "x.html"),
                            "--since", "yesterday"])  # fmt: skip
    assert r.exit_code == 2 and r.stderr.startswith("error: --since: expected Unix seconds")


def finish(m: Any, store: Any, name: str = "solver") -> None:
    """Run the manager's periods until platform ``name`` has finished (at most ~8 s)."""
    for _ in range(40):
        m.tick()
        if store.platform(name).state == "finished":
            break
        time.sleep(0.2)


def test_time_forms() -> None:
    assert parse_time("1732400000.5", "--since") == 1732400000.5
    assert parse_time("2026-11-23T21:00", "--since") == 1795467600.0
    assert parse_time("2026-11-23T22:00+01:00", "--since") == 1795467600.0
    assert parse_time("2h", "--since", now=10_000.0) == 10_000.0 - 7200
    assert parse_time("30m", "--since", now=10_000.0) == 10_000.0 - 1800
    with pytest.raises(ValueError, match="--until: expected a time >= 0"):
        parse_time("-5", "--until")


def test_report_of_a_name_used_again(tmp_path: Path) -> None:
    """A platform called like a deleted one has its own account (``app:solver@2``): the
    report's balance and charges are hers, not the first platform's (it read ``app:solver``:
    a running platform shown with balance 0 and the finished one's charges)."""
    from merkat.bank.money import format_amount
    from merkat.service.records import delete_platform

    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})  # fmt: skip
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    try:
        m.submit("alice", parse(SOLVER))
        m.admit()
        finish(m, store)
        m.tick()
        delete_platform(m, "solver")
        m.submit("alice", parse(SOLVER.replace("budget: 50", "budget: 7").replace(
            "for i in $(seq 1 4); do echo iteration $i/4; sleep 0.05; done", "sleep 60")))
        m.admit()
        for _ in range(3):
            m.tick()
            time.sleep(0.3)
        assert store.platform("solver").account == "app:solver@2"  # type: ignore[union-attr]
        ledger = store.ledger
        second = sum(t.amount for t in ledger.history("app:solver@2")
                     if t.payer == "app:solver@2" and t.payee == "provider")
        first = sum(t.amount for t in ledger.history("app:solver")
                    if t.payer == "app:solver" and t.payee == "provider")
        balance = format_amount(ledger.balance("app:solver@2"))
        assert second > 0 and first > 0 and first != second
        out = tmp_path / "again.html"
        r = runner.invoke(app, ["report", str(tmp_path), "--out", str(out)])
        assert r.exit_code == 0, r.stderr
        (header, row) = parse_page(out).tables["Platforms"]
        cells = dict(zip(header, row, strict=True))
        assert cells["state"] == "running" and cells["balance now"] == balance
        assert float(cells["charged in range"]) == pytest.approx(second / 1e6, rel=1e-3)
    finally:
        m.close()
        store.close()


@pytest.mark.parametrize("form", ["folder", "file", "url"])
def test_out_never_replaces_the_servers_database(live_db: tuple[Path, float, float],
                                                 form: str) -> None:
    """``merkat report DATA --out DATA/merkat.db`` replaced a (running) server's database,
    its bank included, with the page, exit 0; ``--out DATA/server.lock`` its lock."""
    data = live_db[0]
    run = {"folder": str(data), "file": str(data / "merkat.db"),
           "url": f"sqlite:///{data / 'merkat.db'}"}[form]
    before = (data / "merkat.db").read_bytes()
    r = runner.invoke(app, ["report", run, "--out", str(data / "merkat.db")])
    assert r.exit_code == 2 and r.stderr.strip() == (
        f"error: --out: {data / 'merkat.db'} is the database the report reads; give a new file "
        "such as report.html")
    (data / "server.lock").write_text("1")
    r = runner.invoke(app, ["report", run, "--out", str(data / "server.lock")])
    assert r.exit_code == 2 and "is a file of" in r.stderr
    assert (data / "merkat.db").read_bytes() == before
    assert (data / "server.lock").read_text() == "1"
    r = runner.invoke(app, ["report", run, "--out", str(data / "report.html")])  # as the demo
    assert r.exit_code == 0, r.stderr


def test_the_databases_password_is_never_printed(tmp_path: Path) -> None:
    """The page is made to be mailed: ``postgresql://merkat:SECRET@...`` was printed in its
    parameters and in the error when the database could not be opened; a SQLite file was
    named by the read-only URL opened (``sqlite:///file:...?mode=ro&uri=true``)."""
    from merkat.report.live import shown_url

    url = "postgresql://merkat:SECRET@127.0.0.1:1/merkat"
    r = runner.invoke(app, ["report", url, "--out", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "SECRET" not in r.stderr
    assert r.stderr.startswith("error: RUN: cannot open database postgresql://merkat:***@")
    assert shown_url(url) == "postgresql://merkat:***@127.0.0.1:1/merkat"
    assert shown_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    db = tmp_path / "other.db"
    db.write_bytes(b"")
    r = runner.invoke(app, ["report", str(db), "--out", str(tmp_path / "x.html")])
    assert r.stderr.strip() == (f"error: RUN: sqlite:///{db} is not a merkat server database "
                                "(no svc_prices table)")
