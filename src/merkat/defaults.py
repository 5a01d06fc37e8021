"""The units and the defaults of a run, each written once (docs/architecture.md, "Units and
invariants"; every other module imports them from here).

Pure constants: no imports, so every layer may use them.
"""

from __future__ import annotations

MICRO = 1_000_000
"""Micro-credits per credit: the ledger holds integers of micro-credits (decimal-safe money)."""

# --- one period --------------------------------------------------------------------------

PERIOD_S = 300.0
"""The scheduling period of the simulations, seconds (Themis §IV-B: 5 min)."""

LIVE_PERIOD_S = 40.0
"""The scheduling period of the live service, seconds (Merkat §5: 40 s)."""

ADMISSION_S = 10.0
"""Seconds between the applications manager's admission points (Merkat §4.2.2)."""

RESERVE_PRICE = 0.001
"""The reserve price, credits per unit per period, of every traded resource."""

KEEP_ALIVE = 3
"""Periods an application may fail to afford the reserve price of its VMs before it is
stopped (``stopped-budget``, Merkat §4.2.4 iii)."""

# --- what a run is made of, by name --------------------------------------------------------

POLICY = "deadline-strict"
"""The controllers' policy of a trace run (``merkat.control.registry``)."""

MECHANISM = "proportional-share"
"""The market mechanism (``merkat.market.mechanisms``)."""

ECONOMY = "themis"
"""The economy (``merkat.runtime.economy``): renewals minted every period."""

CHARGE_BY = "bid"
"""How the bills are paid (``merkat.runtime.economy``): each VM pays its bid."""

BALANCER = "merkat"
"""The load balancer (``merkat.market.types.BALANCERS``)."""

# --- money ----------------------------------------------------------------------------------

REDISTRIBUTE_EVERY = 12
"""The closed economy's Virtual Bank interval K, periods (grid-cloud model §3.1)."""

DEADLINE_FACTOR_MIN = 1.2
DEADLINE_FACTOR_MAX = 10.0
"""A trace job's deadline factor is drawn in [min, max] (Themis §IV-B, the SLO paper §4)."""

BUDGET_BASE = 60.0
"""A trace job's budget base B_base, credits per core per period (Themis §IV-B)."""

BUDGET_RENEWAL = 20.0
"""A trace job's renewal for the budget base, credits per core per period (Themis §IV-B)."""

# --- the simulated world -----------------------------------------------------------------

VM_OVERHEAD_S = 30.0
"""A simulated VM's boot and resume time, seconds (SLO paper §4.2; Themis' model had none)."""
