"""The papers' experiments, one module per paper (:mod:`.themis`, :mod:`.slo` and its
ablation :mod:`.slo_ablation`, :mod:`.merkat`, :mod:`.tycoon` with :mod:`.tycoon_ar6`,
:mod:`.tycoon_ablation` and :mod:`.tycoon_risk`, :mod:`.gridcloud`),
registered by name in :data:`EXPERIMENTS` (:mod:`.registry`); shared helpers in :mod:`.common`.

``merkat sim experiment NAME --out DIR [--seeds K] [--workers W]`` runs one.
"""

from merkat.experiments import (
    gridcloud,
    merkat,
    slo,
    slo_ablation,
    themis,
    tycoon,
    tycoon_ablation,
    tycoon_ar6,
    tycoon_risk,
)
from merkat.experiments.common import FACTORS, Run, baseline_work_at_deadline, execute
from merkat.experiments.registry import EXPERIMENTS, Experiment, run_experiment

__all__ = ["EXPERIMENTS", "FACTORS", "Experiment", "Run", "baseline_work_at_deadline", "execute",
           "gridcloud", "merkat", "run_experiment", "slo", "slo_ablation", "themis",
           "tycoon", "tycoon_ablation", "tycoon_ar6", "tycoon_risk"]
