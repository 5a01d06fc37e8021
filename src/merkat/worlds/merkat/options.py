"""The options of one trace run (``merkat sim run``): :class:`RunOptions`, and the market's
own, :class:`MarketConfig`, which a run holds once (``RunOptions.market_config``).

Read by :func:`merkat.sim.run.run_trace` (the trace, the cluster, the output) and by the
scheduler it runs (:mod:`merkat.sim.schedulers`: a market run takes the market's options). Its
own module, so that the schedulers and the run that chooses one both import it and neither
imports the other's caller. Every default is :mod:`merkat.defaults`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from merkat.defaults import (
    ADMISSION_S,
    BALANCER,
    BUDGET_BASE,
    BUDGET_RENEWAL,
    CHARGE_BY,
    ECONOMY,
    KEEP_ALIVE,
    MECHANISM,
    PERIOD_S,
    POLICY,
    REDISTRIBUTE_EVERY,
    RESERVE_PRICE,
    VM_OVERHEAD_S,
)
from merkat.market.types import BalanceParams
from merkat.workload.jobs import SloConfig
from merkat.worlds.merkat.moldable import SERIAL_FRACTION


@dataclass(frozen=True)
class MarketConfig:
    """Parameters of a market simulation (defaults: Themis §IV-B / SLO paper §4)."""

    policy: str = POLICY
    period: float = PERIOD_S
    budget_base: float = BUDGET_BASE
    budget_renewal: float = BUDGET_RENEWAL
    reserve: float = RESERVE_PRICE
    trade_memory: bool | None = None  # None: only when hosts have a memory limit
    balance: BalanceParams = field(default_factory=BalanceParams)
    policy_params: dict[str, Any] = field(default_factory=dict)
    economy: str = ECONOMY  # themis | closed (merkat.runtime.economy)
    charging: str = CHARGE_BY  # bid | use
    redistribute_every: int = REDISTRIBUTE_EVERY  # closed economy: the Virtual Bank's K
    keep_alive: int = KEEP_ALIVE  # periods an application may not afford the reserve
    market: str = MECHANISM  # the mechanism, by name (merkat.market.mechanisms)
    # seconds between the applications manager's admission points (Merkat §4.2.2: 10 s);
    # None: arrivals wait for the next period boundary (merkat.core.admission)
    admission: float | None = ADMISSION_S
    # VM overheads of the simulated world (SLO paper §4.2: 30 s each; Themis' model had none)
    boot_s: float = VM_OVERHEAD_S
    resume_s: float = VM_OVERHEAD_S
    fairness: bool = False  # measure the distance to DRF each period (sim.market.fairness)
    migration_overhead: float = 0.10  # CPU lost while a VM migrates (merkat.backends.sim)
    # moldable jobs (merkat.worlds.merkat.moldable): 1 to MOLD_MAX x procs VMs, Amdahl's speed-up
    moldable: bool = False
    serial_fraction: float = SERIAL_FRACTION


@dataclass(frozen=True)
class RunOptions:
    """The options of ``merkat sim run`` (see :func:`merkat.sim.run.run_trace`).

    ``market_config``: the market's options (scheduler ``market``); its budgets are the
    workload's (``slo.budget_base``, ``slo.budget_renewal``) and its load balancing is
    ``balancer``'s, set by the market scheduler when it runs."""

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
    market_config: MarketConfig = field(default_factory=MarketConfig)
    workers: int = 1  # the market's run on this many processes (merkat.worlds.merkat.parallel)
    balancer: str = BALANCER  # the market's load balancer: merkat | themis (market.balance)
