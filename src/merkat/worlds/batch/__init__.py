"""The batch world: jobs queued and started whole by a batch scheduler (the baselines the market
is compared with). :mod:`.engine` is the event engine, :mod:`.baselines` FCFS, EDF, EASY and
conservative backfilling, :mod:`.maui` Maui's priority, :mod:`.fast` the single-pool fast loops.
"""
