"""``merkat bench kubernetes``: the period loop driving the Kubernetes backend on the API
emulator (no cluster needed). Prints one JSON object: ``period`` (the ``--nodes`` ×
``--pods-per-node`` cluster: the first period creating every pod, a steady period, a period with
one arrival — each with ``decide_s``, ``apply_s``, ``emulator_s``, ``api_calls`` and the calls
by verb) and ``growth`` (API calls per period at each ``--grow`` node count). See
:mod:`merkat.bench.kubernetes` and docs/benchmarks.md.
"""

from __future__ import annotations

import typer

from merkat.cli import bench
from merkat.cli._common import fail, print_json

# Bounds: 10 times the largest cluster measured (docs/benchmarks.md: 10,000 pods on 1,000
# nodes); --nodes 10^7 ran out of memory, and each --grow count is a cluster built and run.
MAX_NODES = 10_000
MAX_PODS_PER_NODE = 1_000
MAX_PODS = 100_000
MAX_GROW = 10


@bench.app.command("kubernetes")
def bench_kubernetes(
    nodes: int = typer.Option(100, "--nodes", help="Nodes of the measured cluster (1-10000; at most 100,000 pods in all)."),
    pods_per_node: int = typer.Option(
        10, "--pods-per-node", help="Best-effort applications (one pod each) per node (1-1000)."),
    grow: str = typer.Option(
        "10,100,300", "--grow", help="Node counts (comma-separated) for API calls per period "
        "as the cluster grows (at most 10 counts of 1-10000)."),
    cores: float = typer.Option(16.0, "--cores", help="Cores per node."),
    vm_cores: float = typer.Option(2.0, "--vm-cores", help="Cores each pod wants."),
) -> None:
    """Time the Kubernetes backend's periods on the emulator (JSON on stdout)."""
    if not 1 <= nodes <= MAX_NODES:
        fail(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    if not 1 <= pods_per_node <= MAX_PODS_PER_NODE:
        fail(f"--pods-per-node must be between 1 and {MAX_PODS_PER_NODE}, got {pods_per_node}")
    if nodes * pods_per_node > MAX_PODS:
        fail(f"--nodes x --pods-per-node must be at most {MAX_PODS:,} pods, got "
             f"{nodes * pods_per_node:,}")
    if not 0 < cores < 1e6:
        fail(f"--cores must be > 0, got {cores}")
    if not 0 < vm_cores < 1e6:
        fail(f"--vm-cores must be > 0, got {vm_cores}")
    try:
        sizes = [int(x) for x in grow.split(",") if x.strip()]
    except ValueError:
        fail(f"--grow: expected node counts separated by commas, got {grow!r}")
    if any(not 1 <= n <= MAX_NODES for n in sizes):
        fail(f"--grow: node counts must be between 1 and {MAX_NODES}, got {grow!r}")
    if len(sizes) > MAX_GROW:
        fail(f"--grow: at most {MAX_GROW} node counts, got {len(sizes)}")
    if max(sizes, default=0) * pods_per_node > MAX_PODS:
        fail(f"--grow x --pods-per-node must be at most {MAX_PODS:,} pods, got "
             f"{max(sizes) * pods_per_node:,}")
    from merkat.bench.kubernetes import bench as run

    print_json(run(nodes, pods_per_node, sizes, cores=cores, vm_cores=vm_cores))
