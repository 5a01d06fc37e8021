"""The optional compiled build (``make compiled``: the simulation core through mypyc) gives the
same results as the sources, byte for byte, and merkat refuses a stale build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from merkat.sim.workload.traces import HPC2N, find_trace

ROOT = Path(__file__).resolve().parents[1]

# Market runs that exercise every compiled module: deadline-strict on 1-core hosts at a heavy
# load (suspensions, the tabu search), and the four SLO policies with memory traded.
PROBE = r"""
import hashlib, json, sys
import numpy as np
import merkat
from merkat.sim.cluster import Cluster
from merkat.sim.market.trace import simulate_market
from merkat.sim.workload.swf import read_swf
from merkat.sim.workload.jobs import build_workload
tr = read_swf(sys.argv[1])
digest = hashlib.sha256()
c = Cluster(240, 1, None)
w = build_workload(tr, c, jobs=250, interarrival_factor=0.2, seed=0)
runs = [simulate_market(w, c, seed=0)]
c = Cluster(60, 2, 2048.0)
w = build_workload(tr, c, jobs=120, interarrival_factor=0.3, seed=1)
kinds = ["deadline-strict", "deadline-partial", "performance-strict", "performance-partial"]
names = [kinds[i] for i in np.random.default_rng(5).integers(0, 4, len(w))]
runs.append(simulate_market(w, c, policies=names, seed=1))
for o in runs:
    for a in (o.start, o.end, o.value, o.work_done):
        digest.update(np.ascontiguousarray(a).tobytes())
    digest.update(repr([(r.prices, r.allocated, r.vms, r.migrations, r.charged)
                        for r in o.records]).encode())
    digest.update(json.dumps(dict(o.counts), sort_keys=True).encode())
print(json.dumps({"compiled": merkat.compiled(), "digest": digest.hexdigest(),
                  "met": [int(o.met.sum()) for o in runs]}))
"""


def _probe(src: Path, trace: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    r = subprocess.run([sys.executable, "-c", PROBE, trace], env=env, cwd=src,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    return dict(json.loads(r.stdout))


@pytest.mark.slow
def test_compiled_build_gives_the_same_bytes_as_the_sources(tmp_path: Path) -> None:
    try:
        trace = str(find_trace(HPC2N))
    except FileNotFoundError as exc:  # pragma: no cover - CI has ../shared/traces
        pytest.skip(str(exc))
    pure = tmp_path / "pure"
    shutil.copytree(ROOT / "src", pure, ignore=shutil.ignore_patterns("*.so", "build",
                                                                      "__pycache__"))
    compiled = tmp_path / "compiled"
    shutil.copytree(pure, compiled)
    build = subprocess.run([str(ROOT / "scripts" / "compile.sh"), str(compiled)],
                           env={**os.environ, "PYTHON": sys.executable},
                           capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr[-3000:]
    a, b = _probe(pure, trace), _probe(compiled, trace)
    assert a["compiled"] is False and b["compiled"] is True
    assert a["digest"] == b["digest"] and a["met"] == b["met"]

    # An edited source makes the stale build refuse to load, naming the fix.
    (compiled / "merkat" / "platform" / "period.py").touch()
    stale = subprocess.run([sys.executable, "-c", "import merkat"], cwd=compiled,
                           env={**os.environ, "PYTHONPATH": str(compiled)},
                           capture_output=True, text=True)
    assert stale.returncode != 0
    assert "changed after the compiled build" in stale.stderr and "make compiled" in stale.stderr
