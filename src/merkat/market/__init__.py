"""The market: proportional-share CPU and memory, placement and load balancing (pure code).

Start at :func:`clear`, the one call a scheduling period makes; it is built from
:func:`proportional_share` (``share.py``), :func:`worst_fit_decreasing` (``placement.py``) and
the tabu search :func:`balance` (``balance.py``). ``io.py`` maps the JSON format of
``merkat market clear`` to and from these types.
"""

from merkat.market.allocation_error import allocation_errors, enforceable, vm_errors
from merkat.market.balance import balance
from merkat.market.clear import Clearing, Migration, clear, ideal_allocation
from merkat.market.placement import worst_fit_decreasing
from merkat.market.share import Shares, proportional_share
from merkat.market.types import (
    CPU,
    MEMORY,
    NO_HOST,
    RESOURCES,
    BalanceParams,
    Hosts,
    MarketError,
    VMs,
)

__all__ = [
    "CPU",
    "MEMORY",
    "NO_HOST",
    "RESOURCES",
    "BalanceParams",
    "Clearing",
    "Hosts",
    "MarketError",
    "Migration",
    "Shares",
    "VMs",
    "allocation_errors",
    "balance",
    "clear",
    "enforceable",
    "ideal_allocation",
    "proportional_share",
    "vm_errors",
    "worst_fit_decreasing",
]
