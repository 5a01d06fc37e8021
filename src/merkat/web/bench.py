"""Benchmarks of what people look at (``merkat bench dashboard``, ``merkat bench events``).

Both start a real server (:class:`merkat.service.server.Service`: API, period loop, local
backend) on a loopback port in a temporary data folder, and stop it (and its VMs) at the end.

- :func:`bench_dashboard` — ``vms`` real VMs (``sleep`` processes, no cgroup limits) in
  ``platforms`` platforms; then headless Chromium (``/usr/bin/chromium`` through playwright)
  opens ``/`` in a fresh profile, signs in with the API key, and the clock stops when the
  dashboard shows every platform, every node, the price chart's points and the event log.
  Target (issue 14): first load <= 1 s with 200 VMs.
- :func:`bench_events` — the event stream under one event per VM per period: a producer
  writes ``vms`` events per period into the server's store (as the applications manager
  does), a client reads ``/api/v1/events/stream``; it reports the delivery lag (event time
  to arrival) and whether every event arrived within the period (``keeps_up``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
SLEEPER = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: "exec sleep 3600"
    count: {count}
    cpu: 0.5
    memory: 16
    min_memory: 4
"""


def _api(base: str, key: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
    req = urllib.request.Request(f"{base}/api/v1{path}", data=body)
    req.add_header("Authorization", f"Bearer {key}")
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@contextmanager
def running_server(period: float, nodes: int = 4) -> Iterator[tuple[Any, str, str]]:
    """A server in a temporary folder: yields (service, base URL, an admin's API key)."""
    from merkat.service.config import load_config
    from merkat.service.server import Service

    with tempfile.TemporaryDirectory(prefix="merkat-bench-") as tmp:
        cfg = load_config(
            None,
            port=0,
            data_dir=Path(tmp),
            period=period,
            admission=min(period, 0.5),
            backend={"cgroup_root": str(Path(tmp) / "no-cgroups"), "split": nodes},
        )
        svc = Service(cfg, on_period=lambda rec: None)
        key = svc.store.add_user("bench", admin=True, budget=10**6 * 1_000_000)
        svc.start_background()
        try:
            yield svc, f"http://127.0.0.1:{svc.port}", key
        finally:
            svc.shutdown()


def _summary(xs: list[float]) -> dict[str, float]:
    return {
        "min": round(min(xs), 4),
        "median": round(statistics.median(xs), 4),
        "max": round(max(xs), 4),
    }


def bench_dashboard(
    vms: int = 200, platforms: int = 10, repeat: int = 5, period: float = 2.0
) -> dict[str, Any]:
    """First load of the dashboard with ``vms`` VMs running (module doc); JSON-ready."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise RuntimeError("bench dashboard needs playwright: pip install playwright") from e
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"bench dashboard needs {CHROMIUM}: apt-get install chromium")
    per = [vms // platforms + (1 if k < vms % platforms else 0) for k in range(platforms)]
    with running_server(period) as (svc, base, key):
        for k, count in enumerate(per):
            text = SLEEPER.format(name=f"p{k:03d}", budget=1000, count=count)
            _api(base, key, "/platforms", text.encode(), "application/yaml")
        t_wait = time.monotonic()
        while True:
            allocs = _api(base, key, "/allocations")["items"]
            running = sum(1 for a in allocs if a["state"] == "running")
            if running >= vms:
                break
            if time.monotonic() - t_wait > 120:
                raise RuntimeError(f"only {running} of {vms} VMs running after 120 s")
            time.sleep(0.5)
        time.sleep(3 * period)  # a few price points
        api_s = {}
        for path in ("/platforms", "/allocations", "/nodes", "/accounts", "/prices/history"):
            t = time.perf_counter()
            _api(base, key, path)
            api_s[path] = round(time.perf_counter() - t, 4)
        loads: list[float] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for _ in range(repeat):
                    loads.append(_first_load(browser, base, key, platforms))
            finally:
                browser.close()
        shown = {"vms": running, "platforms": platforms, "nodes": len(svc.backend.node_list())}
    return {
        "benchmark": "dashboard",
        **shown,
        "first_load_s": _summary(loads),
        "target_s": 1.0,
        "meets_target": max(loads) <= 1.0,
        "api_s": api_s,
        "repeat": repeat,
        **machine(),
    }


def _first_load(browser: Any, base: str, key: str, platforms: int) -> float:
    """Seconds from navigation to a complete dashboard, in a fresh browser context."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    try:
        t = time.perf_counter()
        page.goto(f"{base}/")
        page.fill("#key", key)
        page.click("#login button[type=submit]")
        page.wait_for_function(
            """n => document.querySelectorAll('#platforms tbody tr').length >= n
                && document.querySelectorAll('#nodes tbody tr').length > 0
                && window.merkatDashboard.prices[0].length > 0
                && window.merkatDashboard.loaded""",
            arg=platforms,
            timeout=30_000,
        )
        return time.perf_counter() - t
    finally:
        ctx.close()


def bench_events(vms: int = 200, periods: int = 20, period: float = 1.0) -> dict[str, Any]:
    """The event stream under ``vms`` events per period (module doc); JSON-ready."""
    import httpx

    with running_server(period=3600.0, nodes=1) as (svc, base, key):
        store = svc.store
        first = store.events(0, 1_000_000)
        after = first[-1]["id"] if first else 0
        total = vms * periods
        lags: list[float] = []
        got = 0
        done = threading.Event()

        def produce() -> None:
            start = time.time()
            for p in range(periods):
                for v in range(vms):
                    store.add_event("vm-charge", f"p{v // 20:03d}/vm{v}: charged in period {p}")
                # next period boundary (the producer never runs ahead of the clock)
                wait = start + (p + 1) * period - time.time()
                if wait > 0:
                    time.sleep(wait)
            done.set()

        t0 = time.perf_counter()
        producer = threading.Thread(target=produce, daemon=True)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(timeout=httpx.Timeout(10.0, read=period * 5 + 10)) as client, \
                client.stream("GET", f"{base}/api/v1/events/stream?after={after}&poll=0.05",
                              headers=headers) as r:  # fmt: skip
            producer.start()
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                e = json.loads(line[5:])
                lags.append(time.time() - e["time"])
                got += 1
                if got >= total:
                    break
        wall = time.perf_counter() - t0
        producer.join(timeout=period * 2)
    lags.sort()
    return {
        "benchmark": "events",
        "vms": vms,
        "periods": periods,
        "period_s": period,
        "events_produced": total,
        "events_delivered": got,
        "events_per_s": round(got / wall, 1),
        "lag_s": {
            "median": round(lags[len(lags) // 2], 4),
            "p99": round(lags[min(len(lags) - 1, int(0.99 * len(lags)))], 4),
            "max": round(lags[-1], 4),
        },
        "keeps_up": got == total and lags[-1] <= period,
        **machine(),
    }


def machine() -> dict[str, Any]:
    import os
    import platform

    return {
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
