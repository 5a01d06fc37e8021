"""The runtime: the one loop around the period (docs/architecture.md, "The driver").

:class:`~merkat.runtime.driver.Driver` is the only caller of
:meth:`~merkat.core.period.Platform.decide`. It owns the clock
(:mod:`~merkat.runtime.clock`), the arrivals (:mod:`~merkat.runtime.arrivals`), the hooks, and
every effect: ledger writes through the economy (:mod:`~merkat.runtime.economy`) and
``backend.apply``. Trace runs, the scenario experiments and the live service are
configurations of it.
"""
