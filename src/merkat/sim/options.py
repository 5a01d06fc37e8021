"""The options of one trace run (``merkat sim run``): :class:`RunOptions`.

Read by :func:`merkat.sim.run.run_trace` (the trace, the cluster, the output) and by the
scheduler it runs (:mod:`merkat.sim.schedulers`: a market run takes the market's options). Its
own module, so that the schedulers and the run that chooses one both import it and neither
imports the other's caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from merkat.sim.workload.jobs import SloConfig


@dataclass(frozen=True)
class RunOptions:
    """The options of ``merkat sim run`` (see :func:`merkat.sim.run.run_trace`)."""

    trace: Path
    scheduler: str
    out: Path
    jobs: int | None = None
    skip: int = 0
    hosts: int | None = None
    cores_per_host: int | None = None
    memory_per_host: float | None = None
    interarrival_factor: float = 1.0
    seed: int = 0
    strict: bool = False
    slo: SloConfig = field(default_factory=SloConfig)
    policy: str = "deadline-strict"  # the market's controllers (scheduler "market")
    period: float = 300.0  # the market's scheduling period, seconds
    workers: int = 1  # the market's run on this many processes (merkat.sim.parallel)
    economy: str = "themis"  # the market's economy: themis | closed (merkat.runtime.economy)
    charging: str = "bid"  # bid | use
    policy_params: dict[str, Any] = field(default_factory=dict)  # passed to every controller
    market: str = "proportional-share"  # the market mechanism (merkat.market.mechanisms)
    admission: float | None = 10.0  # seconds between admission points (None: periods only)
    balancer: str = "merkat"  # the market's load balancer: merkat | themis (market.balance)
    moldable: bool = False  # trace jobs run on 1 to 2 x procs VMs (merkat.sim.market.moldable)
    serial_fraction: float = 0.05  # Amdahl's serial fraction of a moldable job
