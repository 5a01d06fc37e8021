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


@bench.app.command("kubernetes")
def bench_kubernetes(
    nodes: int = typer.Option(100, "--nodes", help="Nodes of the measured cluster."),
    pods_per_node: int = typer.Option(
        10, "--pods-per-node", help="Best-effort applications (one pod each) per node."),
    grow: str = typer.Option(
        "10,100,300", "--grow", help="Node counts (comma-separated) for API calls per period "
        "as the cluster grows."),
    cores: float = typer.Option(16.0, "--cores", help="Cores per node."),
    vm_cores: float = typer.Option(2.0, "--vm-cores", help="Cores each pod wants."),
) -> None:
    """Time the Kubernetes backend's periods on the emulator (JSON on stdout)."""
    if nodes < 1:
        fail(f"--nodes must be >= 1, got {nodes}")
    if pods_per_node < 1:
        fail(f"--pods-per-node must be >= 1, got {pods_per_node}")
    if not 0 < cores < 1e6:
        fail(f"--cores must be > 0, got {cores}")
    if not 0 < vm_cores < 1e6:
        fail(f"--vm-cores must be > 0, got {vm_cores}")
    try:
        sizes = [int(x) for x in grow.split(",") if x.strip()]
    except ValueError:
        fail(f"--grow: expected node counts separated by commas, got {grow!r}")
    if any(n < 1 for n in sizes):
        fail(f"--grow: node counts must be >= 1, got {grow!r}")
    from merkat.bench.kubernetes import bench as run

    print_json(run(nodes, pods_per_node, sizes, cores=cores, vm_cores=vm_cores))
