"""``merkat prices --since T -o json|csv`` against a running server: the live price series."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

from typer.testing import CliRunner

from merkat.bench.web import running_server
from merkat.cli import app

runner = CliRunner()


def test_price_series_export(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", period=0.3, user="alice", admin=False) as s:
        t0 = time.time()
        store = s.manager.store
        while len(store.prices(0.0, 1000)) < 6:
            time.sleep(0.1)
        common = ["--url", s.base, "--token", s.key]
        r = runner.invoke(app, ["prices", "--since", str(t0 - 60), "-o", "json", *common])
        assert r.exit_code == 0, r.stderr
        items = json.loads(r.stdout)["items"]
        want = store.prices(t0 - 60, 100_000)
        assert items[: len(want)] == want[: len(items)] and len(items) >= 6
        assert [p["period"] for p in items] == sorted(p["period"] for p in items)
        r = runner.invoke(app, ["prices", "--since", "1h", "-o", "csv", *common])
        assert r.exit_code == 0, r.stderr
        rows = list(csv.DictReader(io.StringIO(r.stdout)))
        assert list(rows[0]) == ["period", "time", "cpu", "memory"]
        by_period = {p["period"]: p for p in store.prices(0.0, 100_000)}
        for row in rows:
            p = by_period[int(row["period"])]
            assert float(row["time"]) == p["time"] and float(row["cpu"]) == p["cpu"]
        # A later --since leaves the earlier periods out.
        cut = items[3]["time"]
        r = runner.invoke(app, ["prices", "--since", repr(cut), "-o", "json", *common])
        assert json.loads(r.stdout)["items"][0]["period"] == items[3]["period"]
        # Bad input: one line, exit 2.
        r = runner.invoke(app, ["prices", "--since", "soon", *common])
        assert r.exit_code == 2 and r.stderr.startswith("error: --since: expected Unix seconds")
        r = runner.invoke(app, ["prices", "--since", "1h", "--watch", *common])
        assert r.exit_code == 2 and "do not go together" in r.stderr
