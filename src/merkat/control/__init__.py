"""Application controllers and SLO policies (pure: no I/O, no clock, explicit randomness).

One decision per period: :meth:`Controller.decide` turns an :class:`Observation` into a
:class:`Demand`. Policies are selected by name through :func:`make_policy` (see
:data:`POLICIES`); ``docs/control.md`` maps each one to its paper and lists the decisions taken
where the pseudo-code is garbled.

- ``types.py``     Observation, Demand and their parts
- ``formulas.py``  metric sense, gap, share cost, spend limit, budget split, Alg. 3, makespan
- ``base.py``      the Controller interface (Merkat Alg. 4 callbacks)
- ``generic.py``   Scale-One-VM, Scale-Multi-VMs (Themis Fig. 3), Merkat Alg. 1-3
- ``combined.py``  Merkat §3.2's combined controller: vertical first, then horizontal
- ``deadline.py``  Vertical-Deadline, Horizontal-Deadline (Themis Fig. 4, §IV-A)
- ``slo.py``       the four SLO policies (SLO paper Alg. 1) and best-effort
- ``utility.py``   utilities (SLO paper Table 1), satisfaction, value, efficiency
- ``params.py``    each policy's declared parameters (``PARAMS``), checked by the registry
- ``registry.py``  POLICIES, make_policy, check_params
"""

from merkat.control.base import Controller, Ewma, make_rng
from merkat.control.combined import MerkatCombined
from merkat.control.deadline import HorizontalDeadline, VerticalDeadline, needed_fraction
from merkat.control.formulas import (
    app_alloc,
    gap,
    judge,
    makespan_bound,
    share_cost,
    spend_limit,
    split_budget,
    start_bid,
    vm_upper_bound,
)
from merkat.control.generic import (
    MerkatHorizontal,
    MerkatVertical,
    MerkatVerticalScaler,
    ScaleMultiVMs,
    ScaleMultiVMsController,
    ScaleOneVM,
    ScaleOneVMController,
)
from merkat.control.registry import (
    POLICIES,
    ParamError,
    PolicyError,
    check_params,
    make_policy,
    policy_params,
)
from merkat.control.slo import (
    BestEffort,
    DeadlinePartial,
    DeadlineStrict,
    PerformancePartial,
    PerformanceStrict,
    SLOController,
    SLOKind,
)
from merkat.control.types import (
    CPU,
    MEMORY,
    RESOURCES,
    Action,
    Budget,
    Demand,
    Metrics,
    Observation,
    Phase,
    Sense,
    VMInfo,
    VMState,
    VMView,
)
from merkat.control.utility import (
    deadline_partial,
    deadline_strict,
    efficiency,
    merkat_satisfaction,
    performance_partial,
    performance_strict,
    themis_value,
    utility,
)

__all__ = [
    "CPU",
    "MEMORY",
    "POLICIES",
    "RESOURCES",
    "Action",
    "BestEffort",
    "Budget",
    "Controller",
    "DeadlinePartial",
    "DeadlineStrict",
    "Demand",
    "Ewma",
    "HorizontalDeadline",
    "MerkatCombined",
    "MerkatHorizontal",
    "MerkatVertical",
    "MerkatVerticalScaler",
    "Metrics",
    "Observation",
    "ParamError",
    "PerformancePartial",
    "PerformanceStrict",
    "Phase",
    "PolicyError",
    "SLOController",
    "SLOKind",
    "ScaleMultiVMs",
    "ScaleMultiVMsController",
    "ScaleOneVM",
    "ScaleOneVMController",
    "Sense",
    "VMInfo",
    "VMState",
    "VMView",
    "VerticalDeadline",
    "app_alloc",
    "check_params",
    "deadline_partial",
    "deadline_strict",
    "efficiency",
    "gap",
    "judge",
    "make_policy",
    "make_rng",
    "makespan_bound",
    "merkat_satisfaction",
    "needed_fraction",
    "performance_partial",
    "performance_strict",
    "policy_params",
    "share_cost",
    "spend_limit",
    "split_budget",
    "start_bid",
    "themis_value",
    "utility",
    "vm_upper_bound",
]
