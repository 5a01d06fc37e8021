"""Connecting to a cluster: a :class:`~merkat.backends.kubernetes.backend.KubernetesBackend` on
the credentials of a kubeconfig (lightkube's lookup order), or a one-line
:class:`KubeConfigError`."""

from __future__ import annotations

import os
import ssl
from typing import Any

from merkat.backends.kubernetes.backend import KubernetesBackend
from merkat.backends.kubernetes.kubeauth import PLUGIN_VERSIONS, harden


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
        raise KubeConfigError(_why(kubeconfig, e)) from None
    if single is None:
        raise KubeConfigError(f"kubeconfig: no context {context!r}" if context
                              else "kubeconfig: no current context")
    if not single.cluster.server:
        raise KubeConfigError(f"kubeconfig {kubeconfig or '(from the environment)'}: the "
                              f"context's cluster has no server")
    if single.user is None:
        raise KubeConfigError(f"kubeconfig {kubeconfig or '(from the environment)'}: the "
                              f"context names no user")
    plugin = single.user.exec
    if plugin is not None and plugin.apiVersion not in PLUGIN_VERSIONS:
        raise KubeConfigError(f"kubeconfig: exec plugin {plugin.command}: apiVersion "
                              f"{plugin.apiVersion!r} is not one of {', '.join(PLUGIN_VERSIONS)}")
    files = (("certificate-authority", single.cluster.certificate_auth),
             ("client-certificate", single.user.client_cert),
             ("client-key", single.user.client_key), ("tokenFile", single.user.token_file))
    for field, name in files:
        try:
            full = str(single.abs_file(name)) if name else ""
        except ConfigError as e:  # a relative path in a kubeconfig from the environment
            raise KubeConfigError(f"kubeconfig: {field}: {e}") from None
        if full and not os.path.isfile(full):
            raise KubeConfigError(f"kubeconfig {kubeconfig or '(from the environment)'}: "
                                  f"{field} {full}: no such file")
    try:  # the files it names (certificate-authority, client-certificate...) are read here
        client = Client(config=single, namespace=namespace)
    except ConfigError as e:
        raise KubeConfigError(f"kubeconfig: {e}") from None
    except (OSError, ValueError, ssl.SSLError) as e:
        raise KubeConfigError(_why(kubeconfig, e)) from None
    harden(client)
    return KubernetesBackend(client, namespace=namespace, instance=instance, **options)


def _why(kubeconfig: str | None, e: BaseException) -> str:
    """One line: the file and what is wrong with it (an unreadable file it names, bad YAML, a
    field of the wrong type, base64 that is not)."""
    where = kubeconfig or "(from the environment)"
    if isinstance(e, OSError) and e.filename:
        return f"kubeconfig {where}: {e.filename}: {e.strerror or e}"
    if isinstance(e, UnicodeDecodeError):
        return f"kubeconfig {where}: not a text file (YAML)"
    if isinstance(e, AttributeError | TypeError | KeyError) and not isinstance(e, OSError):
        detail = f" (no {e})" if isinstance(e, KeyError) else ""
        return f"kubeconfig {where}: not a kubeconfig (clusters, contexts, users){detail}"
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"kubeconfig {where}: {type(e).__name__}: {first}"
