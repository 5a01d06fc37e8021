"""``merkat kubernetes ...``: the Kubernetes backend's own commands (docs/kubernetes.md).

- ``merkat kubernetes nodes [--kubeconfig FILE] [--namespace NS]``: what merkat sees of a
  cluster — each node's allocatable cores and MiB, whether it takes pods, and merkat's pods on
  it (a check that credentials and RBAC work before starting the server);
- ``merkat kubernetes emulator``: the bundled API emulator served over HTTP with a kubeconfig
  for it, to try merkat on "a cluster" without one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import typer

from merkat.cli._common import OutputFormat, OutputOption, emit, fail, print_table

app = typer.Typer(help="The Kubernetes backend: nodes as merkat sees them, the API emulator.",
                  no_args_is_help=True)

KubeconfigOption = typer.Option(
    None, "--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, "
    "~/.kube/config).")
NamespaceOption = typer.Option("merkat", "--namespace", "-n", help="merkat's namespace (a "
                               "DNS label: a-z, 0-9, '-', at most 63).")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # as backend.namespace (config.py)


def _check_namespace(namespace: str) -> None:
    """``--namespace`` names a namespace, as the server's ``backend.namespace``: it is a part of
    the API's URLs ('a/../..' listed the pods of every namespace, 'x?y=1' asked for 'x')."""
    if not _NAMESPACE.match(namespace) or len(namespace) > 63:
        fail(f"--namespace must be a DNS label (a-z, 0-9 and '-', at most 63 characters, "
             f"a letter or digit at both ends), got {namespace!r}")


@app.command("nodes")
def nodes(kubeconfig: Path | None = KubeconfigOption, namespace: str = NamespaceOption,
          instance: str = typer.Option("merkat", "--instance", help="merkat server name "
                                       "(label merkat.io/instance)."),
          output: OutputFormat = OutputOption) -> None:
    """The cluster's nodes as merkat's market sees them, and merkat's pods on each."""
    from merkat.backends.kubernetes.connect import KubeConfigError, connect
    from merkat.backends.kubernetes.objects import ApiFailure

    _check_namespace(namespace)
    try:
        b = connect(str(kubeconfig) if kubeconfig else None, namespace=namespace,
                    instance=instance, retries=1)
        b.refresh()
    except KubeConfigError as e:
        fail(str(e))
    except ApiFailure as e:
        fail(f"Kubernetes API: {e.reason}", 1)
    per_node: dict[str, int] = {}
    for p in b.pods.values():
        per_node[p.node or ""] = per_node.get(p.node or "", 0) + 1
    items = [{"name": n, "schedulable": b.capacity.get(n) is not None,
              "cpu": (b.capacity.get(n) or (0.0, 0.0))[0],
              "memory": (b.capacity.get(n) or (0.0, 0.0))[1], "pods": per_node.get(n, 0)}
             for n in b.node_ids]
    emit(output, {"items": items}, lambda: print_table(
        f"nodes (namespace {namespace})", ["NAME", "SCHEDULABLE", "CPU", "MEMORY (MiB)", "PODS"],
        [[i["name"], "yes" if i["schedulable"] else "no", i["cpu"], i["memory"], i["pods"]]
         for i in items]))


@app.command("emulator")
def emulator(
    nodes: int = typer.Option(3, "--nodes", help="Emulated nodes."),
    cores: float = typer.Option(4.0, "--cores", help="Allocatable cores per node."),
    memory: str = typer.Option("8Gi", "--memory", help="Allocatable memory per node "
                               "(a Kubernetes quantity)."),
    namespace: str = NamespaceOption,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8001, "--port", help="Port (0: any free one)."),
    kubeconfig: Path = typer.Option(Path("merkat-emulator.kubeconfig"), "--kubeconfig",
                                    help="Where to write the kubeconfig for it."),
) -> None:
    """Serve the Kubernetes API emulator over HTTP until interrupted; write its kubeconfig."""
    import yaml

    from merkat.backends.kubernetes.emulator import KubeEmulator
    from merkat.backends.kubernetes.emulator import kubeconfig as config
    from merkat.backends.kubernetes.emulator_http import serve
    from merkat.backends.kubernetes.objects import QuantityError, memory_bytes

    _check_namespace(namespace)
    if not 1 <= nodes <= 100_000:
        fail(f"--nodes must be between 1 and 100000, got {nodes}")
    if not 0 < cores < 1e6:
        fail(f"--cores must be > 0, got {cores}")
    if not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, got {port}")
    try:
        if memory_bytes(memory) <= 0:
            raise QuantityError("must be > 0")
    except QuantityError as e:
        fail(f"--memory: {e}")
    emu = KubeEmulator(record=False)
    emu.namespaces.add(namespace)
    for k in range(nodes):
        emu.add_node(f"node-{k}", f"{cores:g}", memory)
    try:
        server = serve(emu.handle, host, port)
    except OSError as e:
        fail(f"--port: cannot listen on {host}:{port}: {e.strerror or e}", 1)
    try:
        tmp = kubeconfig.with_name(kubeconfig.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config(namespace, server.url)))
        tmp.replace(kubeconfig)
    except OSError as e:
        server.server_close()
        fail(f"--kubeconfig: cannot write {kubeconfig}: {e.strerror or e}", 1)
    print(f"Kubernetes API emulator on {server.url} ({nodes} nodes of {cores:g} cores, "
          f"{memory}); kubeconfig: {kubeconfig}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
