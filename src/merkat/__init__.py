"""merkat — a market-based resource manager for shared clusters.

Packages (each concept of the papers lives in one of them):

- :mod:`merkat.market`  proportional-share market, placement, load balancing (pure)
- :mod:`merkat.bank`    ledger, accounts, budgets, charging, transfer tokens
- :mod:`merkat.core`    the scheduling period as a decision, its records and lifecycles
- :mod:`merkat.runtime` the driver: the effects of a period, the clock, the arrivals
- :mod:`merkat.worlds`  the simulated worlds: the market on traces, batch, Tycoon, grid-cloud
- :mod:`merkat.sim`     the trace runner; :mod:`merkat.experiments` the papers' experiments
- :mod:`merkat.control` application controllers and SLO policies (pure)
- :mod:`merkat.cli`     the ``merkat`` command
"""

__version__ = "0.1.0"
