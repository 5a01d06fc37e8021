"""``merkat bench contention``: the live service under more demand than it can sell.

Starts a real ``merkat server`` (a scratch data directory, a free loopback port, ``--period``
seconds, the local backend with its defaults: cgroups when root, the reserved capacity of
docs/service.md), then runs one scenario and stops the server (which destroys its VMs);
:class:`Server`, :func:`run_load` and :func:`run_deadline` return the JSON object:

- ``load`` (the default): best-effort platforms whose VMs (shell busy loops, one core each)
  demand twice the allocatable CPU run for ``--duration`` seconds while a client, as a user
  would, times ``merkat platform list``, ``merkat platform show`` and ``merkat submit`` (each
  a new process, in turn, without pause) and, in a thread, ``GET /api/v1/prices`` (a new
  connection every 0.25 s). It gives the latencies' p50 and p95 (``cli_*_s`` over every CLI
  call, ``api_*_s``), the server's ``period_drift`` and the capacity
  (``allocatable_cpu``, ``reserve_cpu``). Target (issue 26, 2 cores): ``cli_p95_s`` ≤ 1.5,
  ``period_drift`` ≤ 0.05.
- ``deadline`` (issue 26, point 3): three best-effort solvers (0.5 s of CPU per iteration,
  bidding at their policy's default) and, once they run, a ``vertical-deadline`` solver of 80
  iterations × 0.5 s of CPU with a 75 s deadline and a budget of 200; when it has ended (or
  its deadline is 3 periods past) the best-effort ones are stopped. It gives ``platforms``:
  per platform its ``name``, ``budget``, ``outcome`` (the server's: ``met``, ``missed by N
  s``...), ``deadline_s`` (null for best effort), ``finished_s`` (end − submission),
  ``paid``, ``refunded`` and ``returned`` (credits, from the bank's history: the server's
  ``GET /platforms``) and the ``iterations`` its VMs logged.

**Period drift**: the server's periods are due on a grid (``period`` seconds from its first);
each period's lateness is its start (the time the server records with its prices) minus its
grid time. ``period_drift`` is the mean lateness during the measurement over the period (a
fraction), ``period_late_max_s`` the worst, ``periods_missed`` the grid points skipped (a
period that started more than one period late).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from enum import StrEnum
from pathlib import Path
from typing import Any

BURN = """\
name: burn-{k}
controller: {{policy: best-effort}}
budget: 1000
clusters:
  - name: main
    command: 'while :; do :; done'
    cpu: 1
    memory: 32
    min_memory: 8
"""

PROBE = """\
name: probe-{k}
controller: {{policy: best-effort}}
budget: 1
clusters:
  - name: main
    command: 'true'
    cpu: 0.1
    memory: 16
    min_memory: 4
"""

SOLVER = """\
name: {name}
controller: {{policy: {policy}}}
budget: {budget}
clusters:
  - name: solver
    command: exec "$MERKAT_PYTHON" -m merkat.examples.solver --iterations {iterations} --cost 0.5
    cpu: 1
    memory: 128
    min_memory: 64
    monitor: {{kind: log, regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'}}
"""

DEADLINE_S = 75.0
"""The deadline solver's deadline (s after submission), issue 26 point 3."""
BEST_EFFORT = 3


class Scenario(StrEnum):
    load = "load"
    deadline = "deadline"


class Server:
    """A scratch ``merkat server`` in a subprocess and a user's key for it."""

    def __init__(self, period: float, reserve_cpu: float | None) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="merkat-contention-"))
        self.period = period
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        backend = "" if reserve_cpu is None else f"backend: {{reserve_cpu: {reserve_cpu}}}\n"
        (self.data / "server.yaml").write_text(f"period: {period}\nadmission: 1\n{backend}")
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "MERKAT_URL": self.url}
        self.env.pop("MERKAT_DEBUG", None)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        r = subprocess.run([sys.executable, "-m", "merkat", "user", "add", "bench", "--budget",
                            "1000000", "--data-dir", str(self.data), "--parsable"],
                           capture_output=True, text=True, env=self.env, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"user add: {r.stderr.strip()}")
        self.env["MERKAT_TOKEN"] = self.key = r.stdout.strip()
        with open(self.data / "server.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "merkat", "server", "--config",
                 str(self.data / "server.yaml"), "--data-dir", str(self.data), "--port",
                 str(self.port)], env=self.env, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + self.log_tail())
            try:
                self.api("GET", "/health")
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the server did not answer within 60 s: " + self.log_tail())

    def log_tail(self) -> str:
        text = (self.data / "server.log").read_text(errors="replace").strip().splitlines()
        return text[-1] if text else "(no output)"

    def api(self, method: str, path: str, body: str | None = None, timeout: float = 30) -> Any:
        req = urllib.request.Request(f"{self.url}/api/v1{path}", method=method,
                                     data=body.encode() if body is not None else None)
        req.add_header("Authorization", f"Bearer {getattr(self, 'key', '')}")
        if body is not None:
            req.add_header("Content-Type", "application/yaml")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")

    def cli(self, *args: str) -> tuple[float, int]:
        """(wall seconds, exit status) of ``merkat ARGS`` as a new process."""
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "merkat", *args], env=self.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                           timeout=300)
        return time.perf_counter() - t0, r.returncode

    def submit(self, template: str) -> None:
        self.api("POST", "/platforms", template)

    def wait_running(self, names: list[str], timeout: float = 90) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rows = {p["name"]: p for p in self.api("GET", "/platforms")["items"]}
            if all(rows.get(n, {}).get("state") == "running" for n in names):
                return
            time.sleep(0.5)
        raise RuntimeError(f"platforms not running after {timeout:g} s: {', '.join(names)}")

    def stop(self, keep: bool) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if not keep:
            import shutil

            shutil.rmtree(self.data, ignore_errors=True)


def quantile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``xs`` (linear interpolation), None when empty."""
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    return float(statistics.quantiles(xs, n=100, method="inclusive")[round(q * 100) - 1])


def drift(history: list[dict[str, Any]], period: float, since: float) -> dict[str, Any]:
    """Period lateness (module doc) of the periods recorded at or after ``since``. Each
    period's due time is the server loop's rule replayed: a period after the previous one's
    due time, or, when the previous one started a whole period late (a missed boundary, never
    run), a period after that one's start."""
    times = sorted(float(p["time"]) for p in history if p.get("time") is not None)
    late: list[float] = []
    missed = 0
    due = times[0] if times else 0.0
    for prev, t in itertools.pairwise(times):
        if prev >= due + period:  # the previous period missed a boundary: the grid moved
            missed += int((prev - due) // period)
            due = prev + period
        else:
            due += period
        if t >= since:
            late.append(max(0.0, t - due))
    return {"period_drift": round(statistics.fmean(late) / period, 4) if late else None,
            "period_late_max_s": round(max(late), 3) if late else None,
            "periods_missed": missed, "periods": len(late)}


def run_load(srv: Server, duration: float) -> dict[str, Any]:
    """The ``load`` scenario (module doc)."""
    nodes = srv.api("GET", "/nodes")
    machine = nodes.get("machine") or {}
    allocatable = float((machine.get("allocatable") or {}).get("cpu") or sum(
        float((n.get("allocatable") or {}).get("cpu", n["cores"])) for n in nodes["items"]))
    reserve = float((machine.get("reserved") or {}).get("cpu") or 0.0)
    burners = [f"burn-{k}" for k in range(math.ceil(2 * allocatable))]
    for k in range(len(burners)):
        srv.submit(BURN.format(k=k))
    srv.wait_running(burners)
    probe_dir = srv.data / "probes"
    probe_dir.mkdir()
    api_times: list[float] = []
    api_errors = [0]
    done = threading.Event()

    def prices() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            try:
                srv.api("GET", "/prices")
                api_times.append(time.perf_counter() - t0)
            except OSError:
                api_errors[0] += 1
            done.wait(0.25)

    t_start = time.time()
    thread = threading.Thread(target=prices, daemon=True)
    thread.start()
    cli_times: dict[str, list[float]] = {"platform list": [], "platform show": [], "submit": []}
    cli_errors = 0
    k = 0
    end = time.monotonic() + duration
    while time.monotonic() < end:
        probe = probe_dir / f"probe-{k}.yaml"
        probe.write_text(PROBE.format(k=k))
        for name, args in (("platform list", ("platform", "list")),
                           ("platform show", ("platform", "show", burners[0])),
                           ("submit", ("submit", str(probe), "--parsable"))):
            wall, code = srv.cli(*args)
            cli_times[name].append(wall)
            cli_errors += code != 0
        k += 1
    done.set()
    thread.join()
    t_end = time.time()
    running = sum(1 for p in srv.api("GET", "/platforms")["items"]
                  if p["name"] in burners and p["state"] == "running")
    history = srv.api("GET", "/prices/history?limit=100000")["items"]
    every = [t for ts in cli_times.values() for t in ts]
    out: dict[str, Any] = {
        "scenario": "load", "duration_s": round(t_end - t_start, 1), "period_s": srv.period,
        "allocatable_cpu": allocatable, "reserve_cpu": reserve,
        "vms": len(burners), "demand_cpu": float(len(burners)), "vms_running_at_end": running,
        "cli_calls": len(every), "cli_errors": cli_errors,
        "cli_p50_s": _r(quantile(every, 0.5)), "cli_p95_s": _r(quantile(every, 0.95)),
        "cli_max_s": _r(max(every) if every else None),
        "cli": {name: {"calls": len(ts), "p50_s": _r(quantile(ts, 0.5)),
                       "p95_s": _r(quantile(ts, 0.95))} for name, ts in cli_times.items()},
        "api_calls": len(api_times), "api_errors": api_errors[0],
        "api_p50_s": _r(quantile(api_times, 0.5)), "api_p95_s": _r(quantile(api_times, 0.95)),
        **drift(history, srv.period, t_start),
        "enforced": bool(nodes.get("enforced")), "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    return out


def run_deadline(srv: Server) -> dict[str, Any]:
    """The ``deadline`` scenario (module doc)."""
    best = [f"best-effort-{k}" for k in range(1, BEST_EFFORT + 1)]
    for name in best:
        srv.submit(SOLVER.format(name=name, policy="best-effort", budget=60,
                                 iterations=100_000))
    srv.wait_running(best)
    srv.submit(SOLVER.format(name="deadline", budget=200, iterations=80,
                             policy=f"vertical-deadline, reference: {DEADLINE_S:g}"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < DEADLINE_S + 3 * srv.period + 30:
        row = srv.api("GET", "/platforms/deadline")
        if row["state"] in ("finished", "stopped", "failed"):
            break
        time.sleep(1.0)
    for name in best:
        srv.api("POST", f"/platforms/{name}/stop", "{}")
    end = time.monotonic() + 30
    while time.monotonic() < end:
        rows = srv.api("GET", "/platforms")["items"]
        if all(p["state"] in ("finished", "stopped", "failed") for p in rows):
            break
        time.sleep(0.5)
    platforms = []
    for p in sorted(srv.api("GET", "/platforms")["items"], key=lambda p: p["submitted"]):
        is_deadline = p["name"] == "deadline"
        done = _iterations(srv.data / "logs" / p["name"])
        platforms.append({
            "name": p["name"], "budget": _f(p.get("budget")), "state": p["state"],
            "outcome": p.get("outcome"), "deadline_s": DEADLINE_S if is_deadline else None,
            "finished_s": round(p["ended"] - p["submitted"], 1)
            if p.get("ended") is not None and p["state"] == "finished" else None,
            "ended_s": round(p["ended"] - p["submitted"], 1) if p.get("ended") else None,
            "paid": _f(p.get("paid")), "refunded": _f(p.get("refunded")),
            "returned": _f(p.get("returned")), "iterations": done})
    nodes = srv.api("GET", "/nodes")
    machine = nodes.get("machine") or {}
    return {"scenario": "deadline", "period_s": srv.period,
            "allocatable_cpu": (machine.get("allocatable") or {}).get("cpu"),
            "reserve_cpu": (machine.get("reserved") or {}).get("cpu"),
            "platforms": platforms, "enforced": bool(nodes.get("enforced")),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def _iterations(logs: Path) -> int:
    """The solver iterations a platform's VMs logged (its work done)."""
    return sum(f.read_text(errors="replace").count("iteration ") for f in logs.glob("*.log"))


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _f(x: Any) -> float | None:
    return None if x is None else float(x)
