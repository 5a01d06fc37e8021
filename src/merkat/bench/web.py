"""Benchmarks of what people look at (``merkat bench dashboard``, ``merkat bench events``).

Both start a real server (:func:`running_server`: API, dashboard, period loop, local backend)
on a loopback port in a temporary data folder, and stop it (and its VMs) at the end.

- :func:`bench_dashboard` — ``vms`` real VMs (``sleep`` processes, no cgroup limits, each
  sized 0.005 core so that 200 of them fit a 2-core machine's market) in ``platforms``
  best-effort platforms; then headless Chromium (``/usr/bin/chromium`` through playwright)
  opens ``/`` in a fresh profile with the API key in the tab's session (a returning user),
  and the page's clock, from the navigation's start, stops when the dashboard shows every
  platform, every node, the price chart's points and the event log (``first_load_s``); the
  same from the sign-in click for a user who types the key (``sign_in_to_complete_s``).
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
from dataclasses import dataclass
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
    cpu: 0.005
    memory: 8
    min_memory: 4
"""


def _api(base: str, key: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
    req = urllib.request.Request(f"{base}/api/v1{path}", data=body)
    req.add_header("Authorization", f"Bearer {key}")
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@dataclass
class Running:
    """A server started by :func:`running_server`."""

    base: str  # http://127.0.0.1:PORT
    key: str  # the API key of the user it was started with
    manager: Any  # merkat.service.manager.Manager


@contextmanager
def running_server(
    data_dir: Path,
    period: float,
    nodes: int = 1,
    user: str = "bench",
    admin: bool = True,
    budget: float = 1e6,
) -> Iterator[Running]:
    """The service (REST API, dashboard, /metrics, period loop, local backend without cgroup
    limits) on a loopback port, state in ``data_dir``, with one user; stops it and its VMs
    on exit. The same pieces as ``merkat server``, in threads of this process."""
    import uvicorn

    from merkat.service.backends import make_backend
    from merkat.service.config import load_config
    from merkat.service.db import open_store
    from merkat.service.manager import Manager
    from merkat.web.app import create_app

    cfg = load_config(
        None,
        port=0,
        data_dir=data_dir,
        period=period,
        admission=min(period, 0.5),
        backend={"cgroup_root": str(data_dir / "no-cgroups"), "split": nodes},
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(cfg.database)
    key = store.add_user(user, admin=admin, budget=round(budget * 1_000_000))
    manager = Manager(cfg, store, make_backend(cfg))
    http = uvicorn.Server(
        uvicorn.Config(
            create_app(manager), host="127.0.0.1", port=0, log_level="warning", access_log=False
        )
    )
    web = threading.Thread(target=http.run, name="merkat-http", daemon=True)
    stop = threading.Event()
    loop = threading.Thread(target=manager.run, args=(stop,), name="merkat-period", daemon=True)
    try:
        web.start()
        end = time.monotonic() + 30
        while not http.started:
            if time.monotonic() > end or not web.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        port = http.servers[0].sockets[0].getsockname()[1]
        loop.start()
        yield Running(f"http://127.0.0.1:{port}", key, manager)
    finally:
        stop.set()
        http.should_exit = True
        if loop.is_alive():
            loop.join(timeout=30)
        if web.is_alive():
            web.join(timeout=10)
        manager.close()
        store.close()


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
    with (
        tempfile.TemporaryDirectory(prefix="merkat-bench-") as tmp,
        running_server(Path(tmp), period, nodes=4) as srv,
    ):
        base, key = srv.base, srv.key
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
        sign_ins: list[float] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for _ in range(repeat):
                    load, sign_in = _first_load(browser, base, key, platforms)
                    loads.append(load)
                    sign_ins.append(sign_in)
            finally:
                browser.close()
        shown = {"vms": running, "platforms": platforms, "nodes": 4}
    return {
        "benchmark": "dashboard",
        **shown,
        "first_load_s": _summary(loads),
        "sign_in_to_complete_s": _summary(sign_ins),
        "target_s": 1.0,
        "meets_target": max(loads) <= 1.0,
        "api_s": api_s,
        "repeat": repeat,
        **machine(),
    }


READY = """n => document.querySelectorAll('#platforms tbody tr').length >= n
    && document.querySelectorAll('#nodes tbody tr').length > 0
    && window.merkatDashboard.prices[0].length > 0
    && document.querySelectorAll('#events li').length > 0
    && window.merkatDashboard.loaded"""


def _first_load(browser: Any, base: str, key: str, platforms: int) -> tuple[float, float]:
    """In fresh browser contexts, by the page's clock: (navigation start to a complete
    dashboard for a user whose key is in the tab's session, sign-in click to a complete
    dashboard for one who types it)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.add_init_script(f"sessionStorage.setItem('merkat.apiKey', {json.dumps(key)})")
    try:
        page = ctx.new_page()
        page.goto(f"{base}/")
        page.wait_for_function(READY, arg=platforms, timeout=30_000)
        load = float(page.evaluate("performance.now()")) / 1000.0
    finally:
        ctx.close()
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = ctx.new_page()
        page.goto(f"{base}/")
        page.fill("#key", key)
        t0 = float(page.evaluate(
            "() => { const t = performance.now(); "
            "document.querySelector('#login button[type=submit]').click(); return t; }"
        ))  # fmt: skip
        page.wait_for_function(READY, arg=platforms, timeout=30_000)
        sign_in = (float(page.evaluate("performance.now()")) - t0) / 1000.0
    finally:
        ctx.close()
    return load, sign_in


def bench_events(vms: int = 200, periods: int = 20, period: float = 1.0) -> dict[str, Any]:
    """The event stream under ``vms`` events per period (module doc); JSON-ready."""
    import httpx

    with (
        tempfile.TemporaryDirectory(prefix="merkat-bench-") as tmp,
        running_server(Path(tmp), period=3600.0) as srv,
    ):
        base, key, store = srv.base, srv.key, srv.manager.store
        first = store.events(0, 1_000_000)
        after = first[-1]["id"] if first else 0
        total = vms * periods
        lags: list[float] = []
        got = 0
        done = threading.Event()

        def produce() -> None:
            start = time.time()
            for p in range(periods):
                now = time.time()  # one transaction per period, as the manager writes them
                store.add_events(
                    [
                        (
                            "vm-charge",
                            f"p{v // 20:03d}/vm{v}: charged in period {p}",
                            None,
                            None,
                            now,
                        )
                        for v in range(vms)
                    ]
                )
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
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the machine
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
