"""``merkat bench service``: the live service's figures (docs/benchmarks.md).

Starts the real service (SQLite in a scratch directory, the local backend — cgroups when
root — uvicorn on a free loopback port), submits ``--platforms`` platforms of ``--vms`` VMs
each running ``sleep``, lets them start, then measures:

- ``period_ms``: the median wall time of one period (``Manager.tick``: health check,
  monitors, controllers, market, backend limits, charge, records) over ``--periods`` periods;
- ``prices_rps``: ``GET /api/v1/prices`` requests per second on loopback (``--clients``
  keep-alive connections for ``--seconds``, from another process), and the server's CPU time
  per request (``server_cpu_ms_per_request``; ``prices_rps_per_core`` = 1000 / it: the rate
  one free core sustains, which a busy machine's wall-clock rate hides);
- ``rss_mib``: the server process's resident memory with every VM running.

:func:`run` returns them as one JSON object. Targets (issue 13): period ≤ 100 ms with 200
VMs; ≥ 1,000 GET/s.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PLATFORM = """\
name: bench-{i}
controller: {{policy: best-effort}}
budget: 100
clusters:
  - name: main
    command: exec sleep 3600
    count: {vms}
    cpu: 0.05
    memory: 16
    min_memory: 4
"""


def run(platforms: int, vms: int, periods: int, seconds: float, clients: int) -> dict[str, Any]:
    """Start the service, submit ``platforms`` × ``vms`` VMs, time ``periods`` periods and
    ``GET /prices`` for ``seconds`` over ``clients`` connections; shut it down."""
    import resource

    from merkat.service.config import load_config
    from merkat.service.server import Service
    from merkat.service.templates import parse
    from merkat.web.app import create_app

    data = Path(tempfile.mkdtemp(prefix="merkat-bench-"))
    cfg = load_config(None, data_dir=data, port=0, period=3600.0, admission=3600.0,
                      backend={"cgroup_prefix": f"merkat-bench-{int(time.time())}"},
                      quotas={"platforms": platforms, "vms": platforms * vms,  # one user: all
                              "vms_per_platform": vms})
    svc = Service(cfg, on_period=lambda rec: None, app=create_app)
    key = svc.store.add_user("bench", budget=platforms * 100 * 1_000_000)
    try:
        m = svc.manager
        for i in range(platforms):
            m.submit("bench", parse(PLATFORM.format(i=i, vms=vms)))
        m.admit()
        m.tick()  # start every VM
        running = sum(len(a.columns[0]) for a in m.platform.apps.values())
        times = []
        for _ in range(periods):
            t0 = time.perf_counter()
            m.tick()
            times.append((time.perf_counter() - t0) * 1000)
        svc.start_background()
        cpu0 = _cpu()
        requests, elapsed = _get_rps_elsewhere(svc.port, key, seconds, clients)
        cpu_ms = (_cpu() - cpu0) * 1000 / max(1, requests)
        rps = requests / elapsed
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out = {"platforms": platforms, "vms": running, "periods": periods,
               "period_ms": round(statistics.median(times), 2),
               "period_ms_max": round(max(times), 2), "prices_rps": round(rps, 1),
               "server_cpu_ms_per_request": round(cpu_ms, 3),
               "prices_rps_per_core": round(1000 / cpu_ms, 1) if cpu_ms > 0 else None,
               "clients": clients, "rss_mib": round(rss, 1),
               "enforced": bool(svc.backend.enforced)}
    finally:
        svc.shutdown()
    return out


def _cpu() -> float:
    """CPU seconds used by this process so far (every thread)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _get_rps_elsewhere(port: int, key: str, seconds: float, clients: int,
                       ) -> tuple[int, float]:
    """:func:`_get_rps` in another process (a client in the server's process would share its
    interpreter lock and measure that instead)."""
    import subprocess

    code = (f"from merkat.bench.service import _get_rps; "
            f"print(*_get_rps({port}, {key!r}, {seconds}, {clients}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=seconds + 60)
    n, t = out.stdout.split()
    return int(n), float(t)


def _get_rps(port: int, key: str, seconds: float, clients: int) -> tuple[int, float]:
    """(requests, seconds) of GET /api/v1/prices over ``clients`` keep-alive connections."""
    import http.client

    count = [0] * clients
    end = time.monotonic() + seconds

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": f"Bearer {key}"}
        while time.monotonic() < end:
            conn.request("GET", "/api/v1/prices", headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                count[k] += 1
        conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count), time.monotonic() - t0
