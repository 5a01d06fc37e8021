"""The market platform's simulated world: a trace or a scenario replayed through the runtime
driver (:mod:`merkat.runtime.driver`) with the simulated backend and the in-memory bank.

- :mod:`.trace` — a trace's jobs as market applications (``simulate_market``);
- :mod:`.scenarios` — hand-built scenarios (the papers' small experiments);
- :mod:`.options` — ``RunOptions`` / ``MarketConfig``: one options object per run;
- :mod:`.moldable` — moldable jobs (Amdahl speed-up);
- :mod:`.fairness` — fairness measures of a run;
- :mod:`.parallel` — a run cut where the cluster is empty, its pieces on several processes.
"""
