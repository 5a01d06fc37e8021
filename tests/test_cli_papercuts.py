"""The papercuts a new user met (issue 26, "Also"): one name for the API key everywhere, help
without reStructuredText markup, a negative boost's own message, the demo's data directory,
the README's example files, and the simulator's CLI refusing options it would ignore and
saying what ran and how each job ended. Then an operator's: a server refusing at start a
configuration it could not run (CPUs this machine does not have, a period that never comes
again)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from typer import _click as click
from typer.testing import CliRunner

from merkat.cli import NOUNS, app, build_noun
from merkat.cli.client import mib
from merkat.service.config import cpu_ranges, machine_cpus
from merkat.workload.lublin import write as write_lublin

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_one_name_for_the_api_key_everywhere() -> None:
    """The CLI reads MERKAT_TOKEN; the dashboard's sign-in and the docs say the same."""
    texts = [p.read_text() for p in (ROOT / "src").rglob("*") if p.suffix in (".py", ".html",
                                                                                ".js")]
    texts += [p.read_text() for p in (ROOT / "docs").glob("*.md")]
    texts.append((ROOT / "README.md").read_text())
    assert not [t for t in texts if "MERKAT_API_KEY" in t]
    page = (ROOT / "src/merkat/web/static/index.html").read_text()
    assert "MERKAT_TOKEN" in page


def _helps(cmd: click.Command, path: list[str]) -> list[tuple[str, str]]:
    ctx = click.Context(cmd, info_name=" ".join(path))
    out = [(" ".join(path), cmd.get_help(ctx))]
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):  # type: ignore[attr-defined]
            out += _helps(cmd.get_command(ctx, name), [*path, name])  # type: ignore[attr-defined]
    return out


def test_no_help_text_shows_raw_markup() -> None:
    helps = [h for _, n in NOUNS.items() for h in _helps(build_noun(n), ["merkat", n.name])]
    assert len(helps) > 60  # every command and subcommand was seen
    assert [path for path, text in helps if "``" in text] == []
    prices = dict(helps)["merkat prices"]
    assert "(-o json: {" in " ".join(prices.split())


def test_no_command_summary_is_cut_to_a_word() -> None:
    """A group's --help lists each command with its docstring's first sentence: a docstring
    opening with an abbreviation ("Eq. 3-6 ...") was listed as "normal  Eq."."""
    cut = []
    helps = [h for _, n in NOUNS.items() for h in _helps(build_noun(n), ["merkat", n.name])]
    for path, text in helps:
        listing = text.partition("Commands:")[2]
        for line in listing.splitlines():
            words = line.split()
            if len(words) == 2:  # a name and a one-word summary
                cut.append(f"{path} {words[0]}: {words[1]!r}")
    assert cut == []


def test_a_negative_boost_gets_its_own_message_before_any_request() -> None:
    code, _, err = run("platform", "boost", "solver", "-5", "--url", "http://127.0.0.1:9")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: AMOUNT: a boost adds credits: give a positive amount, got -5"]


def test_the_demo_says_its_data_directory_is_a_temporary_one() -> None:
    code, out, _ = run("demo", "--help")
    assert code == 0
    assert "default: a new temporary one" in " ".join(out.split())


def test_memory_is_printed_readably() -> None:
    assert (mib(24110.4), mib(128.0), mib(0.5), mib(None)) == ("24,110", "128", "0.5", None)


def test_every_example_the_readme_names_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"examples/[\w./-]+\.(?:json|yaml|xml)", readme))
    assert {"examples/tycoon/scenario.json", "examples/tycoon/hosts.json",
            "examples/solver/deadline.yaml"} <= named
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []
    # the user's budget covers what the README submits and boosts, with room to spare
    budget = float(re.search(r"merkat user add alice --budget (\d+)", readme).group(1))  # type: ignore[union-attr]
    import yaml

    submitted = [yaml.safe_load((ROOT / p).read_text())["budget"] for p in
                 re.findall(r"merkat submit (examples/\S+\.yaml)", readme)]
    assert len(submitted) >= 3 and sum(submitted) + 50 <= budget


def test_the_readme_tycoon_examples_run(tmp_path: Path) -> None:
    code, out, err = run("tycoon", "best-response", "--budget", "10", "--hosts",
                         str(ROOT / "examples/tycoon/hosts.json"), "-o", "json")
    assert code == 0, err
    bids = json.loads(out)["bids"]
    assert set(bids) == {"h1", "h2", "h3"} and abs(sum(bids.values()) - 10) < 1e-9


def test_a_batch_run_refuses_the_market_options(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    write_lublin(trace, 20, seed=1, nodes=16)
    for flag, value in (("--policy", "best-effort"), ("--economy", "closed"),
                        ("--period", "60"), ("--charging", "use")):
        code, _, err = run("sim", "run", "--trace", str(trace), "--scheduler", "easy",
                           "--out", str(tmp_path / "o"), flag, value)
        assert code == 2, (flag, err)
        assert err.startswith(f"error: {flag}: only with --scheduler market"), err
        assert not (tmp_path / "o").exists()


def test_compare_names_the_mechanism_and_policy_and_every_outcome(tmp_path: Path) -> None:
    trace = tmp_path / "t.swf"
    write_lublin(trace, 40, seed=3, nodes=16)
    dirs = [str(tmp_path / "easy"), str(tmp_path / "market")]
    assert run("sim", "run", "--trace", str(trace), "--scheduler", "easy", "--out", dirs[0])[0] == 0
    code, out, err = run("sim", "run", "--trace", str(trace), "--scheduler", "market",
                         "--policy", "best-effort", "--out", dirs[1], "-o", "json")
    assert code == 0, err
    summary = json.loads(out)
    outcomes = summary["outcomes"]
    assert set(outcomes) == {"finished", "late", "stopped-deadline", "stopped-budget",
                             "never-started"}
    assert sum(outcomes.values()) == summary["jobs"] == 40
    assert outcomes["finished"] == summary["met_deadlines"]
    code, table, _ = run("sim", "compare", *dirs)
    assert code == 0
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in table.splitlines() if line.startswith("│")}
    assert rows["scheduler"] == ["easy", "market proportional-share/best-effort"]
    assert rows["never started"][1] == str(outcomes["never-started"])
    assert rows["stopped at the deadline"][1] == str(outcomes["stopped-deadline"])
    assert rows["finished late"][0] == str(40 - json.loads(
        (tmp_path / "easy/summary.json").read_text())["met_deadlines"])
    assert "jobs_per_s (jobs / simulate_s: speed)" in rows


# A listen address no machine has: were a check missing, the server would fail at its bind
# (exit 1) instead of serving for ever inside the test.
NO_HOST = ("--host", "256.0.0.1", "--port", "0")


@pytest.mark.parametrize("flag", ["--period", "--admission"])
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e300", "1e-9", "100000"])
def test_the_server_refuses_a_period_that_never_comes_again(tmp_path: Path, flag: str,
                                                             value: str) -> None:
    """``--period inf`` (or 1e300) ran one period and never another; 1e-9 recorded periods
    back to back as fast as the database took them."""
    data = tmp_path / "data"
    code, _, err = run("server", *NO_HOST, "--data-dir", str(data), flag, value)
    assert (code, err.splitlines()) == (2, [
        f"error: {flag}: must be a number of seconds from 0.1 to 86400, got {float(value):g}"])
    assert not data.exists()  # refused before any state


def test_the_server_refuses_cpus_this_machine_does_not_have(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cpus: "7-9"`` on a 2-CPU machine started, then every VM's cpuset write failed."""
    have = machine_cpus()
    first = max(have) + 1
    config = tmp_path / "server.yaml"
    config.write_text(f"backend:\n  nodes: [{{name: n0, cpus: '{have[0]},{first}-{first + 2}',"
                      f" memory: 64}}]\n")
    data = tmp_path / "data"
    code, _, err = run("server", *NO_HOST, "--data-dir", str(data), "--config", str(config))
    assert (code, err.splitlines()) == (2, [
        f"error: config: backend.nodes.0.cpus: CPUs {first}-{first + 2} are not on this machine "
        f"(it has {cpu_ranges(have)})"])
    assert not data.exists()
    monkeypatch.setenv("MERKAT_PERIOD", "inf")  # the environment's are the config's
    code, _, err = run("server", *NO_HOST, "--data-dir", str(data))
    assert (code, err.splitlines()) == (2, [
        "error: config: period: must be a number of seconds from 0.1 to 86400, got inf"])


@pytest.mark.parametrize("value", ["inf", "1e12"])
def test_the_demo_refuses_a_duration_it_cannot_run(value: str) -> None:
    """``merkat demo --duration inf`` failed with ``OverflowError: cannot convert float
    infinity to integer``; 1e12 with ``HTTP Error 422`` from its own server (a deadline past
    ten years)."""
    code, _, err = run("demo", "--duration", value, "--port", "1")
    assert code == 2 and err.startswith("error: Invalid value for '--duration': Input should be "
                                        "less than or equal to 31536000"), err


BAD_TIMES = [float("nan"), float("inf"), float("-inf"), -5.0, 1e300, 1e20, True, "soon"]


def test_times_no_clock_prints_are_a_dash_and_far_durations_in_years(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``platform list``/``show``, ``events``, ``prices``, ``file list``, ``report`` print
    times through :func:`time_text`: one such value failed the whole listing with
    ``OverflowError: timestamp out of range`` (1e300) or printed 1969 (a negative time)."""
    from merkat.cli.platforms import _line, clock, print_show
    from merkat.outputs import seconds_text, time_text

    assert [time_text(t) for t in BAD_TIMES] == ["-"] * len(BAD_TIMES)
    assert time_text(None) is None and clock(0.0) is not None and clock(1e300) == "-"
    assert time_text(86400.0, "%Y-%m-%d", utc=True) == "1970-01-02"
    assert [seconds_text(v) for v in (59.6, -3.0, 1e300, float("inf"), float("-inf"),
                                      float("nan"), None)] == [
        "60 s", "-3 s", ">100 years", ">100 years", "->100 years", "-", "-"]
    assert _line({"id": 1, "time": 1e300, "kind": "note", "platform": None,
                  "message": "m"}).split()[:3] == ["1", "-", "note"]
    now = time.time()
    for deadline, ended, says in ((1e300, None, "deadline - (in >100 years)"),
                                  (float("inf"), None, "deadline - (in >100 years)"),
                                  (float("nan"), None, "deadline - (-)"),
                                  (1e300, now, "deadline - (>100 years after it ended)"),
                                  (-1e300, now, "deadline - (>100 years before it ended)")):
        print_show({"name": "p", "owner": "alice", "state": "finished" if ended else "running",
                    "submitted": now - 10, "started": float("nan"), "ended": ended,
                    "deadline": deadline, "template": {}, "vms": []})
        out = capsys.readouterr().out
        assert says in out, out


def test_since_a_time_no_clock_prints_is_refused(tmp_path: Path) -> None:
    """``merkat report DIR --since 1e300`` failed with ``OverflowError`` (printing the
    range); ``events --since 1e300`` asked the server for nothing."""
    code, _, err = run("events", "--since", "1e300", "--url", "http://127.0.0.1:9")
    assert code == 2 and err.startswith(
        "error: --since: expected a time >= 0 and before the year 10000"), err
    (tmp_path / "merkat.db").write_bytes(b"")
    code, _, err = run("report", str(tmp_path), "--out", str(tmp_path / "r.html"),
                       "--until", "1e300")
    assert code == 2 and err.startswith("error: --until: expected a time >= 0 and before"), err
