"""The status views end to end (issue 26, "Status that answers the questions"): a real server
on a free port (VMs unenforced: short shell loops) and the client CLI — ``platform list``'s
outcome, deadline and money, ``platform show`` for an ended platform, ``platform delete``
and a name used again, ``events`` (latest, ``--since``, ``--follow``), ``nodes``' memory and
``prices --watch``'s rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from merkat.service.config import load_config
from merkat.service.server import Service

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

WORK = """\
name: {name}
controller: {{policy: best-effort{reference}}}
budget: {budget}
clusters:
  - name: main
    command: "for i in $(seq 1 {n}); do echo iteration $i/{n}; sleep {dt}; done"
    cpu: 1
    memory: 64
    monitor: {{kind: log, regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'}}
"""


def template(tmp: Path, name: str, n: int = 3, dt: float = 0.1, reference: float | None = None,
             budget: float = 10) -> str:
    f = tmp / f"{name}-{time.monotonic_ns()}.yaml"
    ref = f", reference: {reference}" if reference else ""
    f.write_text(WORK.format(name=name, n=n, dt=dt, reference=ref, budget=budget))
    return str(f)


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True,
                          text=True, env=env, timeout=60, cwd=ROOT)


def ok(env: dict[str, str], *args: str) -> str:
    r = cli(env, *args)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


def wait(cond: Any, timeout: float = 90.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Service, dict[str, str]]]:
    cfg = load_config(None, data_dir=tmp_path / "data", port=0, period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    svc = Service(cfg, on_period=lambda rec: None)
    key = svc.manager.store.add_user("alice", budget=100_000_000)
    svc.start_background()
    env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{svc.port}", "MERKAT_TOKEN": key}
    try:
        yield svc, env
    finally:
        svc.shutdown()


def platforms(env: dict[str, str], via_cli: bool = False) -> dict[str, Any]:
    """``platform list -o json`` (through the CLI, or the API for fast polling)."""
    if via_cli:
        data = json.loads(ok(env, "platform", "list", "-o", "json"))
    else:
        req = urllib.request.Request(f"{env['MERKAT_URL']}/api/v1/platforms")
        req.add_header("Authorization", f"Bearer {env['MERKAT_TOKEN']}")
        with urllib.request.urlopen(req, timeout=30) as r:
            data = json.loads(r.read())
    return {p["name"]: p for p in data["items"]}


def test_list_says_met_or_missed_and_show_gives_an_ended_platforms_totals(
        server: Any, tmp_path: Path) -> None:
    _, env = server
    ok(env, "submit", template(tmp_path, "quick", n=3, dt=0.1, reference=60))
    ok(env, "submit", template(tmp_path, "late", n=12, dt=0.25, reference=1))
    ok(env, "submit", template(tmp_path, "free", n=3, dt=0.1))
    ended = ("finished", "stopped", "failed")
    wait(lambda: (p := platforms(env)) and all(r["state"] in ended for r in p.values()))
    rows = platforms(env, via_cli=True)
    quick, late, free = rows["quick"], rows["late"], rows["free"]
    assert (quick["reason"], quick["outcome"]) == ("finished", "met")
    # counted from its admission (the next admission point after its submission)
    assert 0 <= quick["deadline"] - (quick["submitted"] + 60) <= quick["started"] - quick[
        "submitted"]
    assert late["reason"] == "finished" and late["outcome"].startswith("missed by ")
    missed = float(late["outcome"].split()[2])
    assert missed == pytest.approx(late["ended"] - late["deadline"], abs=1.0) and missed >= 1
    assert free["outcome"] == "finished" and free["deadline"] is None
    for r in rows.values():  # the money, from the bank: what came in went out or back
        assert r["budget"] == 10 and r["refunded"] == 0
        assert r["paid"] > 0 and r["paid"] + r["returned"] == pytest.approx(10, abs=1e-6)
    table = ok(env, "platform", "list")
    assert "OUTCOME" in table and "DEADLINE" in table and "PAID" in table
    assert "│ met " in table and "missed by" in table
    show = ok(env, "platform", "show", "late")
    assert show.splitlines()[0] == (f"platform late (owner alice, best-effort): "
                                    f"{late['outcome']}")
    assert "money: budget 10, paid" in show and f"returned {late['returned']:.6g}" in show
    assert "CGROUP" not in show  # no VM table for an ended platform: its totals instead
    assert "12/12 (100%)" in show, show  # its last progress


def test_delete_an_ended_platform_and_submit_its_name_again(server: Any, tmp_path: Path) -> None:
    svc, env = server
    ok(env, "submit", template(tmp_path, "again", n=1000, dt=0.1))
    wait(lambda: platforms(env)["again"]["state"] == "running")
    r = cli(env, "platform", "delete", "again")
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: platform 'again' is running: stop it first "
                                "(merkat platform stop again)")
    ok(env, "platform", "stop", "again")
    wait(lambda: platforms(env)["again"]["state"] == "stopped")
    first = platforms(env, via_cli=True)["again"]
    assert first["account"] == "app:again" and first["outcome"] == "stopped"
    out = ok(env, "platform", "delete", "again")
    assert out.strip() == "platform again deleted (it had stopped; account app:again kept)"
    assert "again" not in platforms(env)
    assert not (Path(svc.config.data_dir) / "logs" / "again").exists()
    assert cli(env, "platform", "show", "again").returncode == 2  # 404: no such platform
    # the name again: a new account, funded by its own budget (not blocked by the first's key)
    ok(env, "submit", template(tmp_path, "again", n=3, dt=0.1, budget=7))
    second = wait(lambda: (p := platforms(env).get("again")) and p["state"] in (
        "finished", "stopped", "failed") and p)
    assert second["reason"] == "finished", second  # (stopped by its controller, all done)
    assert second["account"] == "app:again@2" and second["budget"] == 7
    assert second["paid"] + second["returned"] == pytest.approx(7, abs=1e-6)
    ledger = svc.manager.store.ledger
    assert ledger.balance("app:again") == 0 and ledger.audit().ok
    history = json.loads(ok(env, "account", "history", "app:again", "-o", "json"))["items"]
    assert history  # the first platform's history stays in the bank
    alice = json.loads(ok(env, "account", "balance", "alice", "-o", "json"))["balance"]
    assert float(alice) == pytest.approx(100 - first["paid"] - second["paid"], abs=1e-6)


def test_events_latest_since_and_follow_in_the_same_format(server: Any, tmp_path: Path) -> None:
    svc, env = server
    for k in range(30):
        svc.manager.store.add_event("note", f"note {k}", None, "alice")
    out = ok(env, "events", "--limit", "3").splitlines()
    assert out[0].split() == ["ID", "TIME", "KIND", "PLATFORM", "MESSAGE"]
    assert [line.split(None, 4)[4] for line in out[1:]] == ["note 27", "note 28", "note 29"]
    data = json.loads(ok(env, "events", "-o", "json", "--limit", "1000"))["items"]
    assert len(data) == 30 and data[-1]["message"] == "note 29"
    assert json.loads(ok(env, "events", "--since", "1h", "-o", "json"))["items"][-1][
        "message"] == "note 29"
    assert json.loads(ok(env, "events", "--since", "2999-01-01", "-o", "json"))["items"] == []
    r = cli(env, "events", "--since", "yesterday")
    assert r.returncode == 2 and r.stderr.startswith("error: --since: expected")
    follow = subprocess.Popen([sys.executable, "-m", "merkat", "events", "--follow", "-n", "1"],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert follow.stdout is not None
        header, last = follow.stdout.readline(), follow.stdout.readline()
        assert header.split() == out[0].split() and last.split(None, 4)[4] == "note 29\n"
        svc.manager.store.add_event("note", "a new one", "p1", "alice")
        new = follow.stdout.readline()
        assert new.split(None, 4)[2:4] == ["note", "p1"] and new.endswith("a new one\n")
        assert len(new.split(None, 4)[0]) <= 6 and new[:6].strip().isdigit()
    finally:
        follow.terminate()
        follow.wait(10)


def test_nodes_memory_and_prices_watch_rows(server: Any) -> None:
    svc, env = server
    table = ok(env, "nodes")
    assert "e+" not in table
    memory = svc.manager.backend.node_list()[0].memory
    assert f"{memory:,.0f}" in table
    watch = subprocess.Popen([sys.executable, "-m", "merkat", "prices", "--watch"],
                             stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert watch.stdout is not None
        lines = [watch.stdout.readline() for _ in range(4)]
    finally:
        watch.terminate()
        watch.wait(10)
    assert lines[0].split() == ["PERIOD", "TIME", "CPU", "MEMORY"]
    periods = [int(line.split()[0]) for line in lines[1:]]
    assert periods == sorted(set(periods))  # one row per new period, no table redrawn
    assert not any(c in "".join(lines) for c in "┏│└")


def test_a_time_no_clock_prints_fails_no_listing(server: Any, tmp_path: Path) -> None:
    """A platform stored with a deadline of 1e300 s (templates did not bound it before)
    made ``platform list`` and ``platform show`` fail with ``OverflowError: timestamp out of
    range`` for its owner and every admin; an event or a price stored at such a time did the
    same to ``events`` and ``prices``. Such a time is printed ``-``, the rest as before."""
    from sqlalchemy import update

    from merkat.service import schema as s

    svc, env = server
    ok(env, "submit", template(tmp_path, "far", n=1, dt=0.1, reference=60))
    wait(lambda: platforms(env)["far"]["state"] in ("finished", "stopped", "failed"))
    with svc.manager.store.engine.begin() as conn:
        conn.execute(update(s.platforms).where(s.platforms.c.name == "far").values(
            deadline=1e300))
        conn.execute(update(s.events).where(s.events.c.platform == "far").values(time=1e300))
        conn.execute(update(s.prices).where(s.prices.c.period <= 1).values(time=1e300))
    row = next(line.split("│") for line in ok(env, "platform", "list").splitlines()
               if "│ far " in line)
    assert [c.strip() for c in row[1:5]] == ["far", "finished", "met", "-"], row
    assert "; deadline - (>100 years after it ended)" in ok(env, "platform", "show", "far")
    lines = ok(env, "events", "--platform", "far").splitlines()[1:]
    assert lines and all(line.split()[1] == "-" for line in lines), lines
    times = [line.split("│")[2].strip() for line in ok(env, "prices", "--since", "0")
             .splitlines() if line.startswith("│")]
    assert "-" in times and times[-1] != "-", times
    assert platforms(env, via_cli=True)["far"]["deadline"] == 1e300  # the data as stored


@pytest.mark.parametrize("kind", ["memory", "sql"])
def test_money_from_the_bank_budget_paid_refunded_returned(kind: str, tmp_path: Path) -> None:
    """The figures ``platform list`` shows, from the ledger's transfers (one aggregate query
    on SQL, the history in memory: the same numbers)."""
    from merkat.bank.ledger import AccountKind
    from merkat.bank.memory import MemoryLedger
    from merkat.service.db import open_store
    from merkat.service.status import Money, money_of

    ledger: Any = MemoryLedger() if kind == "memory" else open_store(
        f"sqlite:///{tmp_path / 'm.db'}").ledger
    ledger.create_account("alice", AccountKind.user)
    ledger.create_account("provider", AccountKind.provider)
    ledger.create_account("app:x", AccountKind.application, owner="alice")
    ledger.create_account("app:x:hold", AccountKind.sub, owner="app:x")
    ledger.mint("alice", 20_000_000, "initial budget")
    moves = [("alice", "app:x", 10_000_000), ("app:x", "app:x:hold", 3_000_000),
             ("app:x:hold", "provider", 1_000_000), ("app:x:hold", "app:x", 2_000_000),
             ("app:x", "provider", 500_000), ("provider", "app:x", 100_000),
             ("app:x", "alice", 8_600_000)]
    for a, b, amount in moves:
        ledger.transfer(a, b, amount, "test")
    assert ledger.balance("app:x") == 0
    assert money_of(ledger, "app:x", "alice", "provider") == Money(
        budget=10.0, paid=1.4, refunded=2.0, returned=8.6)
    assert money_of(ledger, "app:none", "alice", "provider") == Money()
