"""``merkat tycoon best-response``, ``merkat predict ...`` and ``merkat bench tycoon`` from the
CLI: the interface contracts, agreement with the library, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market.best_response import best_response
from merkat.predict import ar

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def _hosts(tmp_path: Path, hosts: object) -> str:
    p = tmp_path / "hosts.json"
    p.write_text(json.dumps(hosts))
    return str(p)


def test_best_response_contract(tmp_path: Path) -> None:
    f = _hosts(tmp_path, [{"id": "a", "weight": 1, "others": 1}, {"id": "b", "weight": 2,
                          "others": 1}, {"id": "c", "weight": 3, "others": 1}])
    code, out, _ = run("tycoon", "best-response", "--budget", "10", "--hosts", f, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    t = 13 / (1 + np.sqrt(2) + np.sqrt(3))
    assert doc["bids"] == pytest.approx({"a": t - 1, "b": np.sqrt(2) * t - 1,
                                         "c": np.sqrt(3) * t - 1})
    assert doc["utility"] == pytest.approx(best_response(10, [1, 2, 3], [1, 1, 1]).utility)
    code, out, _ = run("tycoon", "best-response", "--budget", "10", "--hosts", f)
    assert code == 0 and "utility" in out


def test_best_response_caps_and_reserve(tmp_path: Path) -> None:
    f = _hosts(tmp_path, [{"id": "x", "weight": 2, "others": 1, "cap": 1},
                          {"id": "y", "weight": 2, "others": 0, "cap": 1}])
    code, out, _ = run("tycoon", "best-response", "--budget", "5", "--hosts", f,
                       "--reserve", "0.5", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["bids"] == {"x": 1.0, "y": 0.5} and doc["unspent"] == 3.5


@pytest.mark.parametrize(
    ("hosts", "args", "message"),
    [
        ([{"id": "a", "weight": 1}], [], "missing field 'others'"),
        ([{"id": "a", "weight": -1, "others": 1}], [], "weight must be"),
        ([{"id": "a", "weight": 1, "others": 0}], [], "no reserve"),
        ({"id": "a"}, [], "non-empty list"),
        ([{"id": "a", "weight": 1, "others": 1}], ["--budget", "-1"], "--budget"),
        ([{"id": "a", "weight": 1, "others": 1}], ["--budget", "nan"], "--budget"),
    ],
)
def test_best_response_bad_input(tmp_path: Path, hosts: object, args: list[str],
                                 message: str) -> None:
    f = _hosts(tmp_path, hosts)
    code, out, err = run("tycoon", "best-response", "--budget", "1", "--hosts", f, *args)
    assert code == 2 and message in err and "Traceback" not in err + out
    code, _, err = run("tycoon", "best-response", "--budget", "1", "--hosts", str(tmp_path / "no"))
    assert code == 2 and "cannot read" in err


def _prices(tmp_path: Path) -> tuple[np.ndarray, Path, Path]:
    rng = np.random.default_rng(4)
    x = np.zeros(300)
    for t in range(1, 300):
        x[t] = 0.7 * x[t - 1] + rng.normal()
    x += 20
    csv_path = tmp_path / "p.csv"
    csv_path.write_text("time,price\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(x)))
    json_path = tmp_path / "p.json"
    json_path.write_text(json.dumps([{"price": float(v)} for v in x]))
    return x, csv_path, json_path


@pytest.mark.parametrize("method", ["paper", "adjusted", "mle"])
def test_predict_ar_contract(tmp_path: Path, method: str) -> None:
    x, csv_path, json_path = _prices(tmp_path)
    ref = ar.fit(x, 2, method)  # type: ignore[arg-type]
    for f in (csv_path, json_path):
        code, out, _ = run("predict", "ar", "--history", str(f), "--order", "2", "--method",
                           method, "-o", "json")
        assert code == 0
        doc = json.loads(out)
        assert doc["coefficients"] == pytest.approx(list(ref.coefficients), abs=1e-12)
        assert doc["mean"] == pytest.approx(ref.mean) and doc["sigma2"] == pytest.approx(ref.sigma2)


def test_predict_other_commands_and_errors(tmp_path: Path) -> None:
    x, csv_path, _ = _prices(tmp_path)
    code, out, _ = run("predict", "stats", "--history", str(csv_path), "--window", "1e9", "-o",
                       "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["mean"] == pytest.approx(x.mean()) and doc["std"] == pytest.approx(x.std())
    assert sum(doc["distribution"]["proportions"]) == pytest.approx(1.0)
    code, out, _ = run("predict", "normal", "--history", str(csv_path), "-p", "0.5", "--share",
                       "0.5", "-o", "json")
    assert code == 0
    assert json.loads(out)["budget_for_share"] == pytest.approx(x.mean())  # s·y/(1 − s), y = μ
    multi = tmp_path / "h.json"
    multi.write_text(json.dumps({"h1": [1.0, 1.2, 0.9, 1.1], "h2": [2.0, 2.5, 1.5, 2.2]}))
    code, out, _ = run("predict", "portfolio", "--history", str(multi), "-o", "json")
    assert code == 0
    w = json.loads(out)["minimum_variance"]["weights"]
    assert sum(w.values()) == pytest.approx(1.0)
    bad = tmp_path / "bad.csv"
    bad.write_text("price\n1\nabc\n")
    code, _, err = run("predict", "ar", "--history", str(bad), "--order", "1")
    assert code == 2 and "line 3" in err
    code, _, err = run("predict", "ar", "--history", str(csv_path), "--order", "2", "--method",
                       "burg")
    assert code == 2 and "--method" in err
    code, _, err = run("predict", "normal", "--history", str(csv_path), "-p", "1.5")
    assert code == 2 and "--probability" in err


def test_bench_tycoon_prints_json() -> None:
    code, out, _ = run("bench", "tycoon", "--hosts", "1000", "--repeat", "3", "--no-funding")
    assert code == 0
    doc = json.loads(out)
    assert doc["hosts"] == 1000 and doc["best_response"]["capped"]["median_ms"] > 0


def test_tycoon_run_scenario_with_a_boost(tmp_path: Path) -> None:
    base = {"config": {"hosts": 2, "cpus_per_host": 2, "reserve": 0.0001},
            "jobs": [{"user": u, "budget": 10, "deadline_h": 2, "subjobs": 2, "work_min": 60}
                     for u in ("alice", "bob", "carol")]}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(base))
    code, out, _ = run("tycoon", "run", str(f), "-o", "json")
    assert code == 0
    plain = {j["user"]: j for j in json.loads(out)["items"]}
    f.write_text(json.dumps({**base, "boosts": [{"time_s": 600, "user": "alice", "amount": 20}]}))
    code, out, _ = run("tycoon", "run", str(f), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    boosted = {j["user"]: j for j in doc["items"]}
    assert doc["audit_ok"] and doc["minted"] == pytest.approx(50.0)
    assert boosted["alice"]["time_h"] < plain["alice"]["time_h"]
    assert boosted["alice"]["cost"] + boosted["alice"]["refund"] == pytest.approx(30.0, abs=1e-4)
    assert doc["provider_income"] + doc["refunded"] == pytest.approx(50.0, abs=1e-4)
    for bad, message in (({"jobs": []}, "non-empty"),
                         ({**base, "config": {"hosts": 0}}, "hosts"),
                         ({**base, "boosts": [{"time_s": 0, "user": "dave", "amount": 1}]},
                          "no running job"),
                         # 10^14 intervals to simulate: it never ended
                         ({"jobs": [{**base["jobs"][0], "launch_s": 1e15}]}, "jobs[0]: launch_s"),
                         ({**base, "boosts": [{"time_s": 1e15, "user": "alice", "amount": 1}]},
                          "boosts[0]: time_s")):
        f.write_text(json.dumps(bad))
        code, out, err = run("tycoon", "run", str(f))
        assert code == 2 and message in err and "Traceback" not in out + err
