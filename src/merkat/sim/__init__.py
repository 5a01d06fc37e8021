"""The simulator's runner: a trace replayed under a scheduler chosen by name
(:mod:`.schedulers`: the batch baselines of :mod:`merkat.worlds.batch` and the market of
:mod:`merkat.worlds.merkat`), its outputs (``jobs.csv``, ``summary.json``: :mod:`.metrics`) and
their plots (:mod:`.plots`). ``merkat sim run`` calls :func:`.run.run_trace`.
"""
