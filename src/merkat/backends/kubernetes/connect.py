"""Connecting to a cluster: a :class:`~merkat.backends.kubernetes.backend.KubernetesBackend` on
the credentials of a kubeconfig (lightkube's lookup order), or a one-line
:class:`KubeConfigError`."""

from __future__ import annotations

from typing import Any

from merkat.backends.kubernetes.backend import KubernetesBackend


class KubeConfigError(ValueError):
    """No usable Kubernetes credentials (one line, naming the file or the source)."""


def connect(kubeconfig: str | None = None, *, namespace: str | None = "merkat",
            context: str | None = None, instance: str = "merkat",
            **options: Any) -> KubernetesBackend:
    """A backend on the cluster of ``kubeconfig`` (a file), else the in-cluster service account,
    else ``$KUBECONFIG``, else ``~/.kube/config`` (lightkube's order); nodes read at once.
    Raises :class:`KubeConfigError` for missing or unreadable credentials; an unreachable API
    server is reported by the first period, not raised."""
    import yaml
    from lightkube import Client, KubeConfig
    from lightkube.core.exceptions import ConfigError

    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
        single = config.get(context_name=context)
    except ConfigError as e:
        raise KubeConfigError(f"kubeconfig: {e}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError) as e:
        where = kubeconfig or "(from the environment)"
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise KubeConfigError(f"kubeconfig {where}: {type(e).__name__}: {first}") from None
    if single is None:
        raise KubeConfigError(f"kubeconfig: no context {context!r}" if context
                              else "kubeconfig: no current context")
    client = Client(config=single, namespace=namespace)
    return KubernetesBackend(client, namespace=namespace, instance=instance, **options)
