"""Batched policies: every running application of one built-in policy decided in one numpy
pass (issue 28).

What it replaces: for a *running* application (every VM active) of a policy registered here,
the scalar :meth:`Controller.decide <merkat.control.base.Controller.decide>` —
``on_monitor``, ``stop_reason``, ``reconfigure``, ``needs_suspend`` — called once per
application with an :class:`~merkat.control.types.Observation`. A :class:`Batch` holds the
observations of ``n`` such applications as arrays (one entry per application; per resource it
trades, one row of those); :meth:`BatchedPolicy.decide` computes every application's demand
at once and moves the controllers' own state exactly as the scalar calls would. The forms:
the four SLO policies (``slo.py``: :class:`BatchedSLO`), ``vertical-deadline``
(``deadline.py``: :class:`BatchedVerticalDeadline`) and ``merkat-vertical`` on a trace job
(``generic.py``: :class:`BatchedMerkatVertical`); ``base.py`` holds the data, the
interface, the registry :data:`BATCHED` and the shared element-wise helpers. Each form also
has a plain form (``one``: the same arithmetic for one application on Python floats, its
controller's state written last, so a row that raises moves nothing; ``decide_rows`` is it row
by row), which the period runs, one application at a time (:mod:`merkat.core.batch`): since
the fifteenth session there is no gather for a numpy pass to amortise, and the numpy forms are
the plain forms' reference (``tests/test_batched_plain.py``, row by row, bit for bit). The scalar path stays the
reference and runs everything else: waiting and suspended applications (start, resume),
controllers whose parameters the batch does not cover (``accepts``), custom controllers and
plugins (the ``Controller`` protocol), all in the same period. The platform's gather and
dispatch are :mod:`merkat.core.batch`.

Equivalence: each row is computed with the scalar path's operations in the scalar path's
order (IEEE-754 element-wise operations are the same in numpy and in Python; Python's
``max(a, b)``/``min(a, b)`` are written :func:`pymax`/:func:`pymin`, which keep their tie and
NaN rules), so the demands, and the whole run, are bit for bit those of the scalar path.
``tests/test_batched.py`` pins it: one period and short runs with batched and scalar
controllers side by side against the all-scalar run, every policy here.

Rare branches go back to the scalar helpers per application, on the same values: Merkat
Alg. 1's budget re-split (:meth:`MerkatVerticalScaler.resplit
<merkat.control.generic.MerkatVerticalScaler.resplit>`), Scale-One-VM's bound by the spend
limit (:func:`~merkat.control.formulas.scale_to`), the SLO back-off's random draws
(:meth:`SLOController.back_off <merkat.control.slo.SLOController.back_off>`).

Pure like the rest of ``control/``: no I/O, no clock.
"""

from merkat.control.batched.base import (
    BATCHED,
    SUSPEND,
    Batch,
    BatchDemand,
    BatchedPolicy,
    gap,
    pymax,
    pymin,
    spend_cap,
)
from merkat.control.batched.deadline import BatchedVerticalDeadline
from merkat.control.batched.generic import BatchedMerkatVertical
from merkat.control.batched.slo import BatchedSLO

__all__ = ["BATCHED", "SUSPEND", "Batch", "BatchDemand", "BatchedMerkatVertical",
           "BatchedPolicy", "BatchedSLO", "BatchedVerticalDeadline", "gap", "pymax", "pymin", "spend_cap"]
