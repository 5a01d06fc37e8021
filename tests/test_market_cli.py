"""End-to-end runs of ``merkat market clear`` and ``merkat bench market``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_clear_merkat_example_json() -> None:
    code, out, _ = run("market", "clear", str(ROOT / "examples/merkat-3-nodes.json"), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["prices"]["cpu"] == pytest.approx(0.32)
    by_id = {v["id"]: v for v in doc["vms"]}
    assert by_id["small-1"]["ideal"]["cpu"] == pytest.approx(37.5)
    assert by_id["small-1"]["allocation"]["cpu"] == pytest.approx(33.333333, rel=1e-6)
    assert by_id["large-2"]["ideal"]["cpu"] == pytest.approx(93.75)
    assert by_id["large-2"]["allocation"]["cpu"] == pytest.approx(100)
    assert by_id["small-1"]["error"] == pytest.approx(0.125)
    assert doc["migrations"] == []


def test_clear_themis_example_table() -> None:
    code, out, _ = run("market", "clear", str(ROOT / "examples/themis-2-hosts.json"))
    assert code == 0
    assert "66.67" in out and "50" in out and "100" in out


def test_console_script_runs_as_a_user_would() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "merkat",
            "market",
            "clear",
            "examples/merkat-3-nodes.json",
            "-o",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prices"]["cpu"] == pytest.approx(0.32)


def write(tmp_path: Path, doc: object) -> str:
    p = tmp_path / "m.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def base() -> dict:
    return {
        "hosts": [{"id": "h1", "cpu": 4, "memory": 1024}],
        "vms": [
            {
                "id": "a",
                "bid": {"cpu": 1, "memory": 1},
                "max": {"cpu": 2, "memory": 512},
                "host": None,
            }
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["vms"][0]["bid"].update(cpu=-1), "vms[0].bid.cpu"),
        (lambda d: d["vms"][0].update(host="nope"), "vms[0].host: unknown host 'nope'"),
        (lambda d: d["hosts"][0].pop("cpu"), "hosts[0].cpu"),
        (lambda d: d["vms"][0].update(colour="red"), "vms[0].colour"),
        (lambda d: d.update(reserve_price={"cpu": 5, "memory": 0}), "'a' bids 1 for cpu, under"),
        (lambda d: d.update(balance={"max_migrations": -3}), "balance.max_migrations"),
        (lambda d: d["hosts"].append({"id": "h1", "cpu": 1, "memory": 1}), "duplicate host id"),
    ],
)
def test_bad_input_one_line_error_exit_2(tmp_path: Path, mutate, message: str) -> None:
    doc = base()
    mutate(doc)
    code, out, err = run("market", "clear", write(tmp_path, doc))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_malformed_json_and_missing_file(tmp_path: Path) -> None:
    code, _, err = run("market", "clear", write(tmp_path, '{"hosts": ['))
    assert code == 2 and "not valid JSON" in err and "line 1" in err
    code, _, err = run("market", "clear", str(tmp_path / "absent.json"))
    assert code == 2 and "cannot read" in err


def test_uncapped_vm_and_null_price(tmp_path: Path) -> None:
    doc = {
        "hosts": [{"id": "h1", "cpu": 4, "memory": 0}],
        "vms": [{"id": "a", "bid": {"cpu": 1, "memory": 1}, "max": {"cpu": None, "memory": None}}],
    }
    code, out, _ = run("market", "clear", write(tmp_path, doc), "-o", "json")
    assert code == 0
    out_doc = json.loads(out)
    assert out_doc["vms"][0]["host"] is None  # no memory anywhere: the VM cannot be placed
    assert out_doc["prices"]["memory"] is None  # someone bids on zero capacity: infinite price
    assert out_doc["vms"][0]["error"] is None


def test_bench_market_prints_json() -> None:
    code, out, _ = run("bench", "market", "--vms", "2000", "--hosts", "200", "--seed", "1")
    assert code == 0
    doc = json.loads(out)
    assert {"vms", "hosts", "allocate_s", "place_s", "balance_s", "total_s"} <= doc.keys()
    assert doc["vms"] == 2000 and doc["hosts"] == 200
    assert doc["total_s"] >= doc["place_s"]
