"""The worlds merkat simulates, one package each: its model, its backend and how it is driven.

- :mod:`merkat.worlds.merkat` — the market platform on a trace or a scenario (Merkat, Themis,
  the SLO policies): the runs the runtime driver drives (:mod:`.merkat.trace`,
  :mod:`.merkat.scenarios`), their options (:mod:`.merkat.options`), moldable jobs, fairness and
  the run cut in pieces (:mod:`.merkat.parallel`);
- :mod:`merkat.worlds.batch` — the batch baselines (FCFS, EDF, EASY, conservative, Maui) on
  their event engine;
- :mod:`merkat.worlds.tycoon` — Tycoon's per-host auctions with Best Response agents, and the
  recorded background prices it can replay;
- :mod:`merkat.worlds.gridcloud` — the grid-cloud economic model (posted prices, offers through
  a DIET hierarchy, the Virtual Bank).

The runner that picks a world for a trace is :mod:`merkat.sim`; the papers' experiments over
these worlds are :mod:`merkat.experiments`.
"""
