"""Start-up of the ``merkat`` command (no heavy import before a command needs it), the single
error path (one line on stderr, exit 2 bad input / 1 failure, traceback only with ``--debug``)
and ``merkat bench startup``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import merkat
from merkat.cli import app
from merkat.cli.errors import BadInput, classify, take_debug_flag

SRC = str(Path(merkat.__file__).resolve().parents[1])
HEAVY = ("numpy", "scipy", "matplotlib", "pandas", "sqlalchemy", "fastapi", "cryptography")

runner = CliRunner()

# Runs the merkat command in a fresh interpreter and reports, at exit, which heavy packages
# were imported (as the last line of stderr).
PROBE = """
import atexit, json, sys
HEAVY = {heavy!r}
atexit.register(lambda: sys.stderr.write(
    "\\nMODULES " + json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set(HEAVY))) + "\\n"))
sys.argv = ["merkat", *{args!r}]
from merkat.cli import main
main()
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MERKAT_DEBUG", None)
    return env


def _heavy_imported(*args: str) -> tuple[int, list[str]]:
    code = PROBE.format(heavy=HEAVY, args=list(args))
    r = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120
    )
    line = [x for x in r.stderr.splitlines() if x.startswith("MODULES ")][-1]
    return r.returncode, json.loads(line.removeprefix("MODULES "))


def test_import_merkat_cli_pulls_in_no_heavy_library() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, json, merkat.cli; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = set(json.loads(r.stdout))
    assert "merkat" in loaded and "typer" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
    assert "rich" not in loaded  # help is plain text; rich comes with the first table


def test_help_imports_no_heavy_library() -> None:
    code, heavy = _heavy_imported("--help")
    assert (code, heavy) == (0, [])
    code, heavy = _heavy_imported("sim", "run", "--help")
    assert (code, heavy) == (0, [])


def test_bank_balance_needs_sqlalchemy_only(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'bank.db'}"
    for args in (["bank", "init"], ["bank", "account", "create", "alice", "--kind", "user"]):
        assert runner.invoke(app, [*args, "--db", db]).exit_code == 0
    code, heavy = _heavy_imported("bank", "balance", "alice", "--db", db, "-o", "json")
    assert (code, heavy) == (0, ["sqlalchemy"])


def _merkat_modules(*args: str) -> set[str]:
    """The ``merkat.*`` modules a fresh ``merkat ARGS`` process imported."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.stderr.write('\\nMERKAT ' + json.dumps(sorted("
        "m for m in sys.modules if m.startswith('merkat'))) + '\\n'))\n"
        f"sys.argv = ['merkat', *{list(args)!r}]\n"
        "from merkat.cli import main\nmain()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=120)
    line = [x for x in r.stderr.splitlines() if x.startswith("MERKAT ")][-1]
    return set(json.loads(line.removeprefix("MERKAT ")))


def test_a_bank_command_loads_the_bank_nouns_only(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'bank.db'}"
    assert runner.invoke(app, ["bank", "init", "--db", db]).exit_code == 0
    loaded = _merkat_modules("bank", "audit", "--db", db, "-o", "json")
    assert "merkat.cli.bank" in loaded
    others = {m for m in loaded if m.startswith("merkat.cli.")} - {
        "merkat.cli.bank", "merkat.cli.bench", "merkat.cli.errors", "merkat.cli._common",
        "merkat.cli.validate"}
    assert others == set(), others
    assert not any(m.startswith(("merkat.sim", "merkat.service", "merkat.market")) for m in loaded)
    assert not any(m.startswith("merkat.cli.") for m in _merkat_modules("--help")
                   if m != "merkat.cli.errors")


def test_every_noun_loads_and_its_listed_summary_is_its_help() -> None:
    import typer.main

    from merkat.cli import NOUNS, build_noun

    root = typer.main.get_command(app)
    assert root.list_commands(None) == list(NOUNS.names())  # type: ignore[attr-defined,arg-type]
    for _, noun in NOUNS.items():
        cmd = build_noun(noun)
        full = cmd.get_short_help_str(10_000)
        # the listing may shorten a long first sentence, never say something else
        assert full.startswith(noun.summary.rstrip(".")), (noun.name, full)
    # the nouns that register subcommands from other modules have them once loaded
    sim = build_noun(NOUNS.get("sim"))
    bench = build_noun(NOUNS.get("bench"))
    assert "experiment" in sim.list_commands(None)  # type: ignore[attr-defined,arg-type]
    assert {"startup", "period", "service"} <= set(bench.list_commands(None))  # type: ignore[attr-defined,arg-type]


def test_a_mistyped_noun_suggests_the_right_one() -> None:
    code, _, err = _run("bnak", "balance")
    assert code == 2
    assert _one_error_line(err) == (
        "error: No such command 'bnak'. Did you mean 'bank'? (see merkat --help)")


# --- the error path -------------------------------------------------------------------------


def _run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def test_usage_errors_are_one_line_exit_2() -> None:
    code, _, err = _run("bank", "balance", "alice", "--nope")
    assert code == 2
    line = _one_error_line(err)
    assert "--nope" in line and "merkat bank balance --help" in line
    code, _, err = _run("market", "clear")
    assert _one_error_line(err) == "error: Missing argument 'file' (see merkat market clear --help)"
    code, _, err = _run("sim", "run", "--trace", "x", "--scheduler", "easy", "--out", "o",
                        "--jobs", "many")  # fmt: skip
    assert code == 2 and "--jobs" in _one_error_line(err)


def test_an_internal_error_is_one_line_exit_1_and_debug_shows_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import merkat.market.io

    def boom(data: object) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(merkat.market.io, "parse_market", boom)
    f = tmp_path / "m.json"
    f.write_text("{}")
    code, _, err = _run("market", "clear", str(f))
    assert code == 1
    line = _one_error_line(err)
    assert line.startswith("error: ZeroDivisionError: float division by zero")
    assert "--debug" in line
    for args in (("--debug", "market", "clear", str(f)), ("market", "clear", str(f), "--debug")):
        code, _, err = _run(*args)
        assert code == 1
        assert "Traceback" in err and "boom" in err
        assert err.strip().splitlines()[-1] == "error: ZeroDivisionError: float division by zero"


def test_a_missing_file_names_it_exit_2(tmp_path: Path) -> None:
    code, _, err = _run("market", "clear", str(tmp_path / "absent.json"))
    assert code == 2 and "absent.json" in _one_error_line(err)


def test_the_console_script_never_prints_a_traceback(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "merkat", "sim", "compare", str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert _one_error_line(r.stderr) == f"error: {tmp_path}: no summary.json (not a run directory)"


def test_classify_maps_exceptions_to_exit_codes() -> None:
    assert classify(BadInput("--x: bad")) == (2, "--x: bad")
    assert classify(FileNotFoundError(2, "No such file or directory", "t.swf")) == (
        2,
        "t.swf: No such file or directory",
    )
    assert classify(PermissionError(13, "Permission denied", "/x"))[0] == 1
    assert classify(KeyboardInterrupt()) == (130, "interrupted")
    code, msg = classify(ValueError("line one\nline two"))
    assert code == 1 and msg.startswith("ValueError: line one; line two")
    from merkat.workload.swf import SwfError

    assert classify(SwfError("t.swf:3: 17 fields expected")) == (2, "t.swf:3: 17 fields expected")
    from merkat.bank.errors import InsufficientFunds, UnknownAccount

    assert classify(UnknownAccount("bob"))[0] == 2
    assert classify(InsufficientFunds("a", 1, 2))[0] == 1


def test_take_debug_flag() -> None:
    assert take_debug_flag(["a", "--debug", "b"]) == (["a", "b"], True)
    assert take_debug_flag(["a", "--", "--debug"]) == (["a", "--", "--debug"], False)


# --- the benchmark ----------------------------------------------------------------------------


def test_bench_startup_prints_the_three_commands_as_json() -> None:
    code, out, err = _run("bench", "startup", "--runs", "1", "--warmup", "0")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["benchmark"] == "startup" and doc["runs"] == 1
    assert set(doc["commands"]) == {"help", "bank_balance", "bank_transfer"}
    for c in doc["commands"].values():
        assert 0 < c["min_s"] <= c["median_s"] <= c["max_s"]
        assert c["met"] == (c["median_s"] <= c["target_s"])
    assert doc["commands"]["help"]["target_s"] == 0.3
