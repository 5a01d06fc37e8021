"""merkat — a market-based resource manager for shared clusters.

Packages (each concept of the papers lives in one of them):

- :mod:`merkat.market`  proportional-share market, placement, load balancing (pure)
- :mod:`merkat.bank`    ledger, accounts, budgets, charging, transfer tokens
- :mod:`merkat.sim`     discrete-event simulator, SWF traces, Lublin model, batch baselines
- :mod:`merkat.control` application controllers and SLO policies (pure)
- :mod:`merkat.cli`     the ``merkat`` command
"""

__version__ = "0.1.0"
