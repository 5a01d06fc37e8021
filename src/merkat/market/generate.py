"""Random markets for benchmarks and property tests (seeded, pure)."""

from __future__ import annotations

import numpy as np

from merkat import seeds
from merkat.market.types import NO_HOST, Hosts, VMs


def random_market(
    n_vms: int, n_hosts: int, seed: int, placed_fraction: float = 0.5
) -> tuple[Hosts, VMs]:
    """A heterogeneous cluster and a period's bids.

    Hosts have 8-64 cores and 4 GiB per core. VMs ask for 1-8 cores and 2 GiB per core at most,
    bid uniformly in [0.1, 10] credits per resource, and a ``placed_fraction`` of them already
    run on a random host (the rest are new and must be placed).
    """
    rng = seeds.stream(seed, seeds.WORKLOAD)
    cores = rng.choice(np.array([8.0, 16.0, 32.0, 64.0]), size=n_hosts)
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)), np.column_stack([cores, cores * 4096]))
    vcpus = rng.choice(np.array([1.0, 2.0, 4.0, 8.0]), size=n_vms)
    bid = rng.uniform(0.1, 10.0, size=(n_vms, 2))
    host = np.full(n_vms, NO_HOST, dtype=np.int64)
    if n_hosts:
        placed = rng.random(n_vms) < placed_fraction
        host[placed] = rng.integers(0, n_hosts, size=int(placed.sum()))
    vms = VMs(
        ids=tuple(f"vm{i}" for i in range(n_vms)),
        bid=bid,
        cap=np.column_stack([vcpus, vcpus * 2048]),
        host=host,
    )
    return hosts, vms
