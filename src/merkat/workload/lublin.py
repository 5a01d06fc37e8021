"""The Lublin-Feitelson (2003) model of rigid parallel jobs, seeded, writing SWF.

Implemented from the model's published description and parameters
(``../shared/notes/lublin-model.md``); decisions where the description leaves a choice are in
``docs/lublin.md``. Contract of :func:`generate`:

- ``n`` jobs for a machine of ``nodes`` nodes, of one ``jobtype``: ``"typeless"`` (one
  parameter set, one arrival stream), or ``"mixed"`` (batch and interactive streams; each job is
  of the type whose next arrival comes first);
- size: serial with probability ``serial``; else ``par`` from the two-stage uniform
  (``[ULow, UMed]`` with probability ``Uprob``, else ``[UMed, UHi]``), rounded to an integer when
  ``u <= serial + pow2`` (same ``u``), nodes = round(2^par). ``UHi = log2(nodes)`` and ``UMed`` keeps
  its distance to ``UHi`` from the published set (typeless: 2.5);
- run time: ``p = clip(pa·nodes + pb, 0, 1)``; with probability ``p`` a Gamma(a1, b1) draw, else
  Gamma(a2, b2); the whole draw is repeated while it exceeds 12; run time = exp(draw);
- arrivals: the daily cycle of 48 half-hour buckets (weights from the Gamma(anum, bnum) CDF,
  normalised to mean 1). Each gap draws ``g ~ Gamma(aarr·ARAR, barr)`` (redrawn while > 13) and
  earns ``exp(g)/1800`` points, which are spent from the *current position* in the current bucket
  (the part of the bucket the previous arrival already used counts as spent): whole buckets are
  paid by their weight (1800 s each), and the remainder, as a fraction of the weight of the
  bucket reached, becomes the new position; the gap is 1800 s per bucket advanced plus (new −
  previous position) × 1800 s. The first job's gap starts at time 0, position 0;
- SWF fields as in the reference program: 1 (id), 2 (submit, whole seconds), 4 (run time, whole
  seconds, at least 1), 5 (nodes), 11 (status 1), 15 (type: 0 typeless, 1 batch, 2
  interactive); every other field -1.

The same arguments and seed give the same jobs (one ``numpy.random.Generator``, the seed's
``workload`` stream of :mod:`merkat.seeds` — exactly ``numpy.random.default_rng(seed)`` —,
draws in job order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from merkat import seeds
from merkat.workload.swf import NFIELDS, write_swf

BUCKET_S = 1800.0
BUCKETS = 48
MAX_LOG_RUN = 12.0
MAX_LOG_GAP = 13.0


@dataclass(frozen=True)
class LublinParams:
    """One published parameter set (notes: ``lublin-model.md``)."""

    serial: float
    pow2: float
    ulow: float
    umed: float
    uhi: float
    uprob: float
    a1: float
    b1: float
    a2: float
    b2: float
    pa: float
    pb: float
    aarr: float
    barr: float
    anum: float
    bnum: float
    arar: float

    def for_nodes(self, nodes: int) -> LublinParams:
        """The set scaled to a machine of ``nodes`` nodes: UHi = log2(nodes), UMed keeps its
        distance to UHi. On small machines (UHi - 2.5 under ULow, i.e. up to 9 nodes) the
        range is kept ordered: ULow <= UMed <= UHi, ULow lowered to UHi if needed
        (docs/lublin.md)."""
        uhi = math.log2(nodes)
        ulow = min(self.ulow, uhi)
        umed = min(max(uhi - (self.uhi - self.umed), ulow), uhi)
        return replace(self, uhi=uhi, umed=umed, ulow=ulow)


PARAMS: dict[str, LublinParams] = {
    "batch": LublinParams(
        0.2927, 0.6686, 1.2, 5, 7, 0.875,
        6.57, 0.823, 639.1, 0.0156, -0.003, 0.6986,
        6.0415, 0.8531, 6.1271, 5.2740, 1.0519,
    ),
    "interactive": LublinParams(
        0.1541, 0.625, 1, 3, 5.5, 0.705,
        3.8351, 0.6605, 7.073, 0.6856, -0.0118, 0.9156,
        6.5510, 0.6621, 8.9186, 3.6680, 0.9797,
    ),
    "typeless": LublinParams(
        0.244, 0.576, 0.8, 4.5, 7, 0.86,
        4.2, 0.94, 312, 0.03, -0.0054, 0.78,
        10.2303, 0.4871, 8.1737, 3.9631, 1.0225,
    ),
}  # fmt: skip

TYPE_CODE = {"typeless": 0, "batch": 1, "interactive": 2}
JOBTYPES = ("typeless", "mixed")


def bucket_weights(anum: float, bnum: float) -> npt.NDArray[np.float64]:
    """The 48 half-hour weights of the daily cycle, normalised to mean 1."""
    # the Gamma(anum, scale=bnum) CDF, as scipy.stats.gamma.cdf computes it (the regularised
    # lower incomplete gamma of x / scale), without importing scipy.stats (~0.6 s)
    from scipy.special import gammainc

    w = np.zeros(BUCKETS)
    for i in range(11, 59):
        w[(i - 1) % BUCKETS] = gammainc(anum, (i + 0.5) / bnum) - gammainc(anum, (i - 0.5) / bnum)
    out: npt.NDArray[np.float64] = w / w.mean()
    return out


class _Arrivals:
    """One arrival stream with the daily cycle."""

    def __init__(self, p: LublinParams, rng: np.random.Generator) -> None:
        self.shape = p.aarr * p.arar
        self.scale = p.barr
        self.weights = bucket_weights(p.anum, p.bnum).tolist()
        self.rng = rng
        self.bucket = 0
        self.position = 0.0  # fraction of the current bucket already used
        self.time = 0.0

    def next(self) -> float:
        g = self.rng.gamma(self.shape, self.scale)
        while g > MAX_LOG_GAP:
            g = self.rng.gamma(self.shape, self.scale)
        w = self.weights
        points = math.exp(g) / BUCKET_S + self.position * w[self.bucket]
        gap = 0.0
        while points > w[self.bucket]:
            points -= w[self.bucket]
            self.bucket = (self.bucket + 1) % BUCKETS
            gap += BUCKET_S
        new_position = points / w[self.bucket]
        gap += (new_position - self.position) * BUCKET_S
        self.position = new_position
        self.time += gap
        return self.time


def _size(p: LublinParams, rng: np.random.Generator) -> int:
    u = rng.random()
    if u <= p.serial:
        return 1
    par = rng.uniform(p.ulow, p.umed) if rng.random() <= p.uprob else rng.uniform(p.umed, p.uhi)
    if u <= p.serial + p.pow2:
        par = float(round(par))
    nodes: int = round(2.0 ** float(par))
    return max(1, nodes)


def _run_time(p: LublinParams, nodes: int, rng: np.random.Generator) -> float:
    prob = min(1.0, max(0.0, p.pa * nodes + p.pb))
    while True:
        x = rng.gamma(p.a1, p.b1) if rng.random() <= prob else rng.gamma(p.a2, p.b2)
        if x <= MAX_LOG_RUN:
            return math.exp(x)


def generate(
    n: int, seed: int = 0, nodes: int = 128, jobtype: str = "typeless"
) -> npt.NDArray[np.float64]:
    """``n`` jobs as an ``(n, 18)`` SWF array (module docstring for the rules)."""
    if n < 0:
        raise ValueError(f"jobs must be >= 0, got {n}")
    if nodes < 2:
        raise ValueError(f"nodes must be >= 2, got {nodes}")
    if jobtype not in JOBTYPES:
        raise ValueError(f"job type must be one of {', '.join(JOBTYPES)}, got {jobtype!r}")
    rng = seeds.stream(seed, seeds.WORKLOAD)
    names = ["typeless"] if jobtype == "typeless" else ["batch", "interactive"]
    sets = {k: PARAMS[k].for_nodes(nodes) for k in names}
    streams = {k: _Arrivals(sets[k], rng) for k in names}
    upcoming = {k: streams[k].next() for k in names}
    out = np.full((n, NFIELDS), -1.0)
    for i in range(n):
        kind = min(names, key=lambda k: (upcoming[k], k))
        submit = upcoming[kind]
        upcoming[kind] = streams[kind].next()
        p = sets[kind]
        size = min(_size(p, rng), nodes)
        run = _run_time(p, size, rng)
        row = out[i]
        row[0] = i + 1
        row[1] = round(submit)
        row[3] = max(1, round(run))
        row[4] = size
        row[10] = 1
        row[14] = TYPE_CODE[kind]
    return out


def header(n: int, nodes: int, seed: int, jobtype: str) -> dict[str, str]:
    return {
        "Version": "2.2",
        "Computer": f"synthetic: Lublin-Feitelson model ({jobtype}), merkat",
        "Note": f"seed {seed}; generated by merkat sim lublin",
        "MaxJobs": str(n),
        "MaxRecords": str(n),
        "MaxNodes": str(nodes),
        "MaxProcs": str(nodes),
        "MaxRuntime": str(round(math.exp(MAX_LOG_RUN))),
    }


def write(
    path: str | Path, n: int, seed: int = 0, nodes: int = 128, jobtype: str = "typeless"
) -> None:
    """Generate ``n`` jobs and write them as SWF to ``path`` (``.gz`` compressed)."""
    write_swf(path, header(n, nodes, seed, jobtype), generate(n, seed, nodes, jobtype))
