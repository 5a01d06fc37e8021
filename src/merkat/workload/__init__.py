"""Workloads and the machine they run on, shared by every world: SWF traces (:mod:`.swf`), the
traces merkat knows by name (:mod:`.traces`, :mod:`.trace_index`), the Lublin model
(:mod:`.lublin`), jobs with deadlines and budgets (:mod:`.jobs`) and the simulated cluster
(:mod:`.cluster`).
"""
