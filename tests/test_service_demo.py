"""`merkat demo` (the main job of `make run`): the live market under more demand than the
machine can serve, scaled down to ~30 s; what its report says happened, happened."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from merkat.service.demo import scenario
from merkat.service.demo_report import Facts, PlatformFacts, render, sparkline


def test_the_scenario_scales_with_the_machine_and_the_run() -> None:
    """On 1.5 allocatable cores: 2 urgent VMs needing 30 % of the machine for 0.45 of the
    run, 10 batch VMs, 2 thrifty VMs whose limit is 1.1x the price of 14 VMs at the reserve."""
    urgent, batch, thrifty = scenario(150.0, 1.5, 0.001)
    assert (urgent.count, batch.count, thrifty.count) == (2, 10, 2)
    assert urgent.deadline_s == 68  # 0.45 x 150
    # 0.3 x 1.5 cores x 67.5 s / 2 VMs = 15.19 CPU-s per VM: 61 iterations of 0.25 s
    assert "--iterations 61 --cost 0.25" in urgent.template
    assert "reference: 68" in urgent.template
    # 1.1 x 14 x 0.001 / 1.5 = 0.0103
    assert thrifty.max_price == 0.01 and "max_price: 0.01}" in thrifty.template
    assert [e.count for e in scenario(150.0, 4.0, 0.001)] == [4, 20, 4]


def test_sparklines_are_on_a_log_scale() -> None:
    assert sparkline([0.001, 0.01, 0.1, 0.0]) == "▁▅█·"
    assert sparkline([2.0, 2.0]) == "▁▁"
    assert sparkline([]) == ""


def _facts(met: bool, received: float, enforced: bool = True) -> Facts:
    money = {"budget": 100_000_000, "paid": 250_000, "refunded": 50_000,
             "returned": 99_750_000, "left": 0}
    urgent = PlatformFacts("urgent", 2, "deadline solver", "finished" if met else "stopped",
                           "finished" if met else "stopped: the deadline has passed", 68.0,
                           finished_s=61.4 if met else None, met=met,
                           bids=[0.001, 0.004, 0.02, 0.01], shares=[0.2, 0.6, 1.1, 0.9],
                           raises=2, cpu_received=received, cpu_allocated=0.9, money=money,
                           progress=1.0 if met else 0.69)
    thrifty = PlatformFacts("thrifty", 2, "best effort, price limit 0.01", "stopped",
                            "stopped at the end of the demo", max_price=0.01, suspensions=1,
                            resumes=1, changes=["suspended at 10 s (price 0.0200 = 20.0x)",
                                                "resumed at 70 s (price 0.0080 = 8.0x)"],
                            money=dict(money, paid=0, returned=100_000_000))
    return Facts([urgent, thrifty], [0.009, 0.02, 0.008], 0.001, 1.5, "demo",
                 2_000_000_000, 1_999_750_000, True, 2_000_000_000, 2_000_000_000,
                 Path("/tmp/d/report.html"), "merkat report /tmp/d --out /tmp/d/report.html",
                 load=9.5, vms=14, enforced=enforced)


def test_the_report_ends_with_the_verdict_the_money_and_the_audit() -> None:
    f = _facts(met=True, received=0.85)
    lines = render(f).splitlines()
    assert f.ok
    assert lines[-3] == ("deadline urgent met: finished 61 s after submission, 7 s before its "
                         "deadline of 68 s")
    assert lines[-2] == ("money: budgets 200, paid 0.25, refunded 0.1, returned 199.75, left on "
                         "the platforms' accounts 0; user demo: 2000 before, 1999.75 after")
    assert lines[-1] == "bank audit: OK (minted 2000, balances 2000)"
    assert "  bid per VM raised 2 times: 0.001 at start, highest 0.02 (20x); share up to 1.10 " \
        "of 1.5 cores" in lines
    assert "  CPU received 0.85 cores on average, of 0.90 allocated" in lines
    assert ("thrifty (2 VMs, best effort, price limit 0.01 = 10x the reserve): 1 suspension(s), "
            "1 resume(s): suspended at 10 s (price 0.0200 = 20.0x), resumed at 70 s (price "
            "0.0080 = 8.0x)") in lines
    assert ("cpu price: lowest 0.0080, highest 0.0200 = 20x the reserve price 0.001 (credits "
            "per core per period)") in lines


def test_a_missed_deadline_says_why_the_cpu_fell_short() -> None:
    f = _facts(met=False, received=0.2)
    text = render(f)
    assert not f.ok
    assert text.splitlines()[-3] == ("deadline urgent MISSED (stopped: the deadline has passed, "
                                     "69 % of its work done; deadline 68 s)")
    assert ("of 0.90 allocated (the machine was busy with other work: load average 9.5 on "
            f"{os.cpu_count()} CPUs before the demo's 14 VMs started)") in text
    text = render(_facts(met=False, received=0.2, enforced=False))
    assert "(allocations not enforced: no writable cgroups; run as root)" in text


def test_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "merkat", "demo", "--port", str(port),
                            "--duration", "20", "--period", "2", "--data-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert f"cannot start the demo's server: cannot listen on 127.0.0.1:{port}" in \
        r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("args", "message"), [
    (["--duration", "5"], "--duration"),
    (["--duration", "30", "--period", "5"], "--period: at most a tenth of --duration (3 s)"),
])
def test_a_demo_too_short_for_the_market_is_bad_input(args: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "merkat", "demo", *args], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="the demo's VMs need cgroups (root)")
def test_the_demo_shows_the_market_at_work(tmp_path: Path, cpu_heavy: int) -> None:
    from merkat.report.live import write_html
    from merkat.service.demo import run

    out = io.StringIO()
    facts = run(duration=30.0, period=1.5, data_dir=tmp_path, out=out, html_report=write_html)
    text = render(facts)
    urgent, _, thrifty = facts.platforms
    periods = out.getvalue().splitlines()
    assert any(" | urgent bid " in line and "^" in line for line in periods), out.getvalue()
    # the urgent solver raised its bid (at least 3x its start) and got more than twice its
    # equal share of 1/7 of the machine
    assert urgent.raises >= 1 and max(urgent.bids) >= 3 * urgent.bids[0], text
    assert max(urgent.shares) > 0.3 * facts.capacity, text
    assert urgent.cpu_received is not None and 0 < urgent.cpu_received <= facts.capacity * 1.1
    assert urgent.progress is not None and 0 < urgent.progress <= 1
    # the price climbed to 10x the reserve; thrifty was suspended, then resumed
    assert max(facts.prices) >= 10 * facts.reserve, text
    assert thrifty.suspensions >= 1 and thrifty.resumes >= 1, text
    assert any(c.startswith("suspended at") for c in thrifty.changes), text
    assert any(c.startswith("resumed at") for c in thrifty.changes), text
    # money: every platform ended and its budget went home; the owner lost exactly what her
    # platforms paid; the books balance
    assert all(p.state in ("finished", "stopped") for p in facts.platforms), text
    assert all(p.money["left"] == 0 for p in facts.platforms), text
    assert all(p.money["returned"] > 0 for p in facts.platforms), text
    for p in facts.platforms:
        m = p.money
        assert m["budget"] == m["paid"] + m["returned"] + m["left"], (p.name, m)
    assert facts.owner_now == facts.owner_start - facts.total("paid")
    assert facts.audit_ok and "bank audit: OK" in text.splitlines()[-1]
    assert (urgent.met is True) == facts.ok
    last = text.splitlines()
    assert last[-3].startswith("deadline urgent met: " if urgent.met else
                               "deadline urgent MISSED")
    assert last[-2].startswith("money: budgets 140, paid ")
    assert facts.html is not None and facts.html.read_text().startswith("<!DOCTYPE html")
    assert (tmp_path / "logs" / "urgent" / "vm1.log").read_text().startswith("iteration 1/")


def test_a_suspension_is_reported_at_the_price_its_controller_saw() -> None:
    """The price sampled after a suspension lacks the application's own bid (9.5x below a
    10x limit); the report gives the price of the clearing the controller decided on."""
    from merkat.service.demo_report import state_changes

    reserve = 0.01
    prices = [0.05, 0.105, 0.095, 0.08, 0.07]
    states = ["running", "running", "suspended", "suspended", "running"]
    changes = state_changes([0.0, 5.0, 10.0, 15.0, 20.0], prices, states, reserve)
    assert changes == ["suspended at 10 s (price seen 0.1050 = 10.5x)",
                       "resumed at 20 s (price seen 0.0800 = 8.0x)"]
