"""The embedded demo (``merkat demo``, ``make run``): the live service on this machine with
two deadline-driven solvers and one best-effort solver sharing it.

It starts the real server (API on a loopback port, period loop, local backend with cgroups
when root), creates a demo user, submits the three templates through the API, prints each
period (prices; each platform's state, bid, allocation and progress), and after ``duration``
seconds — or when every platform has ended — prints the report: did each deadline platform
meet its deadline, with which bids and allocations; the prices; what each platform paid; the
bank's audit. Then it stops the server and destroys its VMs. Exit 0 when both deadlines were
met, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

DEMO_BUDGET = 2000

SOLVER = """\
name: {name}
controller: {{policy: {policy}{reference}}}
budget: {budget}
clusters:
  - name: solver
    command: exec "$MERKAT_PYTHON" -m merkat.service.solver --iterations {iterations} --cost 0.25
    cpu: 1
    memory: 128
    min_memory: 64
    monitor:
      kind: log
      regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'
"""


def templates(scale: float) -> list[str]:
    """The demo's platforms; ``scale`` stretches deadlines and work with the run's length."""
    def n(x: float) -> int:
        return max(4, round(x * scale))

    return [
        SOLVER.format(name="deadline-a", policy="vertical-deadline",
                      reference=f", reference: {0.55 * scale * 150:.0f}", budget=600,
                      iterations=n(120)),
        SOLVER.format(name="deadline-b", policy="vertical-deadline",
                      reference=f", reference: {0.8 * scale * 150:.0f}", budget=600,
                      iterations=n(120)),
        SOLVER.format(name="best-effort", policy="best-effort", reference="", budget=150,
                      iterations=n(2000)),
    ]


def _api(base: str, key: str, method: str, path: str, body: bytes | None = None,
         ctype: str = "application/json") -> Any:
    req = urllib.request.Request(f"{base}/api/v1{path}", data=body, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    if body is not None:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run_demo(duration: float, period: float, port: int = 0, data_dir: Path | None = None,
             out: Any = None) -> int:
    """Run the demo (module doc); returns the exit code."""
    from merkat.service.config import load_config
    from merkat.service.server import Service, describe_period, log

    out = out or sys.stdout
    data = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="merkat-demo-"))
    cfg = load_config(None, port=port, data_dir=data, period=period,
                      admission=min(period, 10.0),
                      backend={"cgroup_prefix": f"merkat-demo-{int(time.time())}"})
    svc = Service(cfg, on_period=lambda rec: None)
    key = svc.store.add_user("demo", budget=DEMO_BUDGET * 1_000_000)
    seen: dict[str, list[tuple[float, float]]] = {}  # per platform: (cpu bid, cpu allocation)

    def on_period(rec: dict[str, Any]) -> None:
        log(describe_period(rec))
        for name in ("deadline-a", "deadline-b", "best-effort"):
            row = svc.store.platform(name)
            if row is None:
                continue
            vms = svc.manager.vms(name)
            m = svc.backend.metrics_of.get(name) if hasattr(svc.backend, "metrics_of") else None
            prog = f"{m.work_done:g}/{m.work_total:g}" if m and m.work_total else "-"
            bid = sum(v["bid"]["cpu"] for v in vms)
            cpu = sum(v["allocation"]["cpu"] for v in vms)
            if vms:
                seen.setdefault(name, []).append((bid, cpu))
            log(f"  {name:12s} {row.state:9s} progress {prog:>9s}  bid cpu {bid:8.4g}  "
                f"allocation {cpu:5.3f} cores  paid {svc.manager.spent(name):.4g}")

    svc.on_period = on_period
    svc.start_background()
    base = f"http://127.0.0.1:{svc.port}"
    log(svc.banner())
    log(f"demo: user 'demo' (budget {DEMO_BUDGET}); watch from another shell with\n"
        f"  export MERKAT_URL={base} MERKAT_TOKEN={key}\n"
        f"  merkat platform list; merkat platform show deadline-a; merkat prices --watch; "
        f"merkat events --follow")
    scale = duration / 150.0
    try:
        for text in templates(scale):
            row = _api(base, key, "POST", "/platforms", text.encode(), "application/yaml")
            log(f"submitted {row['name']}")
        end = time.monotonic() + duration
        while time.monotonic() < end:
            rows = _api(base, key, "GET", "/platforms")["items"]
            if rows and all(r["state"] in ("finished", "stopped", "failed") for r in rows):
                break
            time.sleep(0.5)
        return _report(svc, seen, out)
    finally:
        svc.shutdown()
        log(f"demo: server stopped, VMs destroyed; state kept in {data}")


def _report(svc: Any, seen: dict[str, list[tuple[float, float]]], out: Any) -> int:
    """Print the demo's report; 0 when every deadline platform met its deadline."""
    with svc.manager.lock:
        apps = dict(svc.manager.platform.apps)
    prices = svc.store.prices()
    lines = ["", "== merkat demo report =="]
    ok = True
    for name, app in apps.items():
        row = svc.store.platform(name)
        spec = app.spec
        paid = app.spent / 1e6
        rows = seen.get(name, [])
        shape = (f"; over {len(rows)} periods running: mean cpu bid "
                 f"{sum(b for b, _ in rows) / len(rows):.4g}, mean allocation "
                 f"{sum(a for _, a in rows) / len(rows):.3f} cores") if rows else ""
        if spec.deadline is not None:
            met = app.status.value == "finished" and app.end_time is not None and \
                app.end_time <= spec.deadline + svc.config.period
            ok &= met
            when = (f"finished {app.end_time - spec.submit_time:.0f} s after admission"
                    if app.end_time is not None and app.status.value == "finished"
                    else f"{row.state if row else app.status.value}")
            lines.append(f"{name}: deadline {spec.deadline - spec.submit_time:.0f} s — "
                         f"{'MET' if met else 'MISSED'} ({when}); paid {paid:.4g}{shape}")
        else:
            lines.append(f"{name}: best effort — {row.state if row else app.status.value}"
                         f" ({app.reason or 'running'}); paid {paid:.4g}{shape}")
    if prices:
        cpu = [p["cpu"] for p in prices]
        lines.append(f"cpu price over {len(prices)} periods: min {min(cpu):.4g}, "
                     f"mean {sum(cpu) / len(cpu):.4g}, max {max(cpu):.4g}")
    audit = svc.store.ledger.audit()
    lines.append(f"bank audit: {'OK' if audit.ok else 'FAILED'} (minted {audit.minted / 1e6:g},"
                 f" balances {audit.sum_of_balances / 1e6:g})")
    print("\n".join(lines), file=out, flush=True)
    return 0 if ok and audit.ok else 1
