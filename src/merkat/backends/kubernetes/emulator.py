"""A stateful emulator of the part of the Kubernetes API merkat uses, as an HTTP transport.

No emulator on PyPI covers pod binding and the ``resize`` subresource (``kmock`` 0.8 is a
request/response mock to be scripted per test, ``mockernetes`` does not exist), so this module
emulates them at the HTTP level: :class:`KubeEmulator` is an ``httpx2.MockTransport`` handler
(the HTTP library lightkube uses), so the real lightkube client sends real requests — paths,
verbs, query strings, content types, JSON bodies — and gets API-server responses back.

What it emulates (Kubernetes 1.33+ semantics):

- ``GET /api/v1/nodes``; ``GET`` pods in a namespace or in all namespaces with an equality
  ``labelSelector``; ``POST``/``GET``/``DELETE`` a pod; ``POST .../pods/{name}/binding``;
  ``PATCH .../pods/{name}/resize`` (strategic merge on the container named in the body);
  ``GET .../pods/{name}/log`` (``tailLines``); ``POST /api/v1/namespaces``; claims; ``GET
  .../pods/{name}/exec``, a WebSocket whose command really runs in a subprocess here, with the
  pod's environment (:mod:`~merkat.backends.kubernetes.emulator_exec`; each recorded in
  :attr:`KubeEmulator.execs`).
- Errors as the API server sends them (``Status`` bodies): 404 NotFound, 409 AlreadyExists (a
  pod of the same name still terminating) and 409 Conflict on binding an already bound pod,
  422 Invalid (limit below request, a QoS class change, a memory limit decrease when the
  memory ``resizePolicy`` is ``NotRequired``, a resize of a pod not bound to a node).
- The kubelet (:mod:`.emulator_kubelet`: admission, resizes actuated, Deferred, Infeasible,
  InProgress, RestartContainer) and containers and claims (:mod:`.emulator_volumes`).
- Faults for tests: :meth:`KubeEmulator.fail` makes the next matching requests fail with a
  given status; ``linger`` keeps a deleted pod "terminating" for that many further requests;
  :meth:`remove_node` deletes a node (its pods stay until :meth:`gc`, like the pod GC).

Every request is recorded in :attr:`KubeEmulator.calls` as ``(verb, path, query, body)``.

With ``schema=True`` (the default when ``MERKAT_KUBE_SCHEMA=1``, as the test suite sets it)
every request is checked against the Kubernetes API schema (:mod:`.schema`) and answered 422
``Invalid`` (``strict decoding error: ...``, as ``fieldValidation=Strict`` does) when the real
API server would reject it, and every JSON answer of the emulator is checked too (a violation
answers 500: an emulator bug); both are recorded in :attr:`KubeEmulator.schema_errors`.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx2

from merkat.backends.kubernetes.emulator_exec import PROTOCOLS, ExecSession, accept
from merkat.backends.kubernetes.emulator_kubelet import Kubelet
from merkat.backends.kubernetes.emulator_status import (
    REASONS,
    ApiError,
    listing,
    ok,
    selector,
    status,
)
from merkat.backends.kubernetes.emulator_volumes import Volumes, container_env, pod_dir, wipe
from merkat.backends.kubernetes.objects import (
    Json,
    cpu_millis,
    memory_bytes,
    parse_quantity,
)

SERVER = "https://kubernetes.emulator"
TOKEN = "merkat-emulator-token"
_POD = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)(?:/(binding|resize|log|status|exec))?$")
_PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods$")
_CLAIMS = re.compile(r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims(?:/([^/]+))?$")


@dataclass
class Call:
    verb: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str = ""


@dataclass
class ExecRecord:
    """One exec session: where, what, the subprotocol chosen and the exit code (None while
    running, or when the command could not start or was killed)."""

    namespace: str
    pod: str
    container: str
    argv: list[str]
    protocol: str
    exit_code: int | None = None
    done: bool = False


@dataclass
class _Fault:
    verb: str
    pattern: re.Pattern[str]
    status: int
    reason: str
    times: int


@dataclass
class KubeEmulator(Volumes, Kubelet):
    """The emulated API server; pass :meth:`transport` to ``lightkube.Client``."""

    linger: int = 0
    nodes: dict[str, Json] = field(default_factory=dict)
    pods: dict[tuple[str, str], Json] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=lambda: {"default"})
    calls: list[Call] = field(default_factory=list)
    record: bool = True
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    _faults: list[_Fault] = field(default_factory=list)
    _terminating: dict[tuple[str, str], int] = field(default_factory=dict)
    _on_node: dict[str, dict[tuple[str, str], None]] = field(default_factory=dict)
    busy_s: float = 0.0  # time spent answering (the benchmark tells it from the client's)
    execs: list[ExecRecord] = field(default_factory=list)
    exec_protocols: tuple[str, ...] = PROTOCOLS  # ("v4.channel.k8s.io",): an older server
    exec_dir: str | None = None  # the containers' working directories (default: a temp dir)
    exec_limit_s: float = 60.0  # a command still running then is killed
    _rv: int = 0
    schema: bool = field(default_factory=lambda: os.environ.get("MERKAT_KUBE_SCHEMA") == "1")
    schema_errors: list[str] = field(default_factory=list)
    claims: dict[tuple[str, str], Json] = field(default_factory=dict)
    resize_delay: int = 0  # requests a fitting resize stays InProgress (emulator_kubelet.py)
    _in_progress: dict[tuple[str, str], int] = field(default_factory=dict)

    # --- setup and inspection (not API calls) -------------------------------------------

    def add_node(self, name: str, cpu: str | float = 4, memory: str = "8Gi", *,
                 ready: bool = True, unschedulable: bool = False) -> None:
        self.nodes[name] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": self._next_rv()},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {
                "allocatable": {"cpu": str(cpu), "memory": memory, "pods": "110"},
                "capacity": {"cpu": str(cpu), "memory": memory, "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def remove_node(self, name: str) -> None:
        """The node leaves the cluster; its pods remain (phase Unknown) until :meth:`gc`."""
        del self.nodes[name]
        for pod in self.pods.values():
            if pod["spec"].get("nodeName") == name:
                pod["status"]["phase"] = "Unknown"

    def gc(self) -> None:
        """The pod garbage collector: pods bound to nodes that no longer exist are deleted."""
        for key in [k for k, p in self.pods.items()
                    if p["spec"].get("nodeName") and p["spec"]["nodeName"] not in self.nodes]:
            self._forget(key)

    def fail(self, verb: str, path_regex: str, status: int, *, times: int = 1,
             reason: str = "") -> None:
        """The next ``times`` requests ``verb`` on a path matching ``path_regex`` answer
        ``status`` (409 Conflict, 500...) without any effect."""
        self._faults.append(_Fault(verb.upper(), re.compile(path_regex), status,
                                   reason or REASONS.get(status, "InternalError"), times))

    def pod(self, namespace: str, name: str) -> Json:
        return self.pods[(namespace, name)]

    def finish(self, namespace: str, name: str, code: int = 0) -> None:
        """The pod's container exits with ``code`` (phase Succeeded or Failed)."""
        self.pods[(namespace, name)]["status"]["phase"] = "Succeeded" if code == 0 else "Failed"

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    # --- the API ---------------------------------------------------------------------------

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        t0 = time.perf_counter()
        try:
            if self.schema:
                return self._checked(request)
            return self._handle(request)
        finally:
            self.busy_s += time.perf_counter() - t0

    def _checked(self, request: httpx2.Request) -> httpx2.Response:
        """:meth:`_handle` with the request and the answer checked against the API schema."""
        from merkat.backends.kubernetes.schema import check_request, check_response

        where = f"{request.method} {request.url.path}"
        try:
            body = json.loads(request.content) if request.content else None
        except ValueError:
            body = "<not JSON>"
        errors = check_request(request.method, request.url.path,
                               parse_qs(request.url.query.decode(), keep_blank_values=True), body)
        if errors:
            self.schema_errors += [f"request {where}: {e}" for e in errors]
            return status(422, "Invalid", f"strict decoding error: {'; '.join(errors)}")
        response = self._handle(request)
        if response.status_code != 101 and response.headers.get(
                "content-type", "").startswith("application/json"):
            errors = check_response(json.loads(response.content))
            if errors:
                self.schema_errors += [f"response to {where}: {e}" for e in errors]
                return status(500, "InternalError", f"emulator answer off the schema: {errors}")
        return response

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        verb, path = request.method, request.url.path
        query = {k: v[-1] for k, v in parse_qs(request.url.query.decode()).items()}
        ctype = request.headers.get("content-type", "")
        body = json.loads(request.content) if request.content else None
        if self.record:
            self.calls.append(Call(verb, path, query, body, ctype))
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            return status(401, "Unauthorized", "Unauthorized")
        for key in list(self._terminating):  # deleted pods go away after `linger` requests
            self._terminating[key] -= 1
            if self._terminating[key] < 0:
                del self._terminating[key]
                self._forget(key)
                self._kubelet(None)
        self._tick_in_progress()
        for f in self._faults:
            if f.times > 0 and f.verb == verb and f.pattern.search(path):
                f.times -= 1
                return status(f.status, f.reason, f"injected fault on {verb} {path}")
        try:
            if (m := _POD.match(path)) and m.group(3) == "exec":
                return self._exec(request, m.group(1), m.group(2))
            return self._route(verb, path, query, body, ctype)
        except ApiError as e:
            return status(e.code, e.reason, e.message)

    def _route(self, verb: str, path: str, query: dict[str, str], body: Any,
               ctype: str) -> httpx2.Response:
        if path == "/api/v1/nodes" and verb == "GET":
            return ok(listing("NodeList", list(self.nodes.values()), self._rv))
        if path == "/api/v1/pods" and verb == "GET":
            return ok(self._list_pods(None, query))
        if path == "/api/v1/namespaces" and verb == "POST":
            name = body["metadata"]["name"]
            if name in self.namespaces:
                raise ApiError(409, "AlreadyExists", f'namespaces "{name}" already exists')
            self.namespaces.add(name)
            return ok({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, 201)
        if (m := _CLAIMS.match(path)):
            return self._claims(verb, m.group(1), m.group(2), body)
        m = _PODS.match(path)
        if m:
            if verb == "GET":
                return ok(self._list_pods(m.group(1), query))
            if verb == "POST":
                return ok(self._create(m.group(1), body), 201)
        m = _POD.match(path)
        if m:
            ns, name, sub = m.group(1), m.group(2), m.group(3)
            pod = self.pods.get((ns, name))
            if pod is None or ((ns, name) in self._terminating and sub is not None):
                raise ApiError(404, "NotFound", f'pods "{name}" not found')
            if sub is None and verb == "GET":
                return ok(pod)
            if sub is None and verb == "PATCH":  # metadata only (merkat: annotations)
                return ok(self._annotate(pod, body))
            if sub is None and verb == "DELETE":
                return ok(self._delete(ns, name, pod))
            if sub == "binding" and verb == "POST":
                return ok(self._bind(pod, body), 201)
            if sub == "resize" and verb == "PATCH":
                return ok(self._resize(pod, body, ctype))
            if sub == "log" and verb == "GET":
                text = self.logs.get((ns, name), "")
                if query.get("tailLines", "").isdigit():
                    lines = text.splitlines(keepends=True)
                    text = "".join(lines[len(lines) - min(len(lines), int(query["tailLines"])):])
                return httpx2.Response(200, text=text)
        raise ApiError(404, "NotFound", f"the server could not find the requested resource "
                        f"({verb} {path})")

    def _exec(self, request: httpx2.Request, ns: str, name: str) -> httpx2.Response:
        """``pods/{name}/exec``: checked as the API server and kubelet do, then a WebSocket
        session (``101``) whose far end is the command running here."""
        if request.method not in ("GET", "POST"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not allowed")
        pod = self.pods.get((ns, name))
        if pod is None or (ns, name) in self._terminating:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        params = parse_qs(request.url.query.decode())
        argv, c = params.get("command", []), _container(pod) or {}
        container = params.get("container", [c.get("name", "")])[-1]
        if container != c.get("name"):
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not argv:
            raise ApiError(400, "BadRequest", "you must specify at least 1 command")
        flags = {s: params.get(s, ["false"])[-1] in ("true", "1") for s in ("stdin", "stdout", "stderr")}
        if not any(flags.values()):
            raise ApiError(400, "BadRequest", "you must specify at least one of stdin, "
                            "stdout, stderr")
        phase = pod["status"].get("phase")
        if not pod["spec"].get("nodeName"):
            raise ApiError(400, "BadRequest", f"pod {name} does not have a host assigned")
        if phase in ("Succeeded", "Failed"):
            raise ApiError(400, "BadRequest", "cannot exec into a container in a completed "
                            f"pod; current phase is {phase}")
        if phase != "Running":
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is '
                            "waiting to start: ContainerCreating")
        try:
            protocol, headers = accept(request, self.exec_protocols)
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e)) from None
        cwd = pod_dir(self._dir(), pod)
        env = container_env(pod, c, cwd, self._dir())
        rec = ExecRecord(ns, name, container, argv, protocol)
        self.execs.append(rec)

        def ended(code: int | None) -> None:
            rec.exit_code, rec.done = code, True

        session = ExecSession(argv, env=env, cwd=cwd, protocol=protocol, stdin=flags["stdin"],
                              limit_s=self.exec_limit_s, on_exit=ended)
        return httpx2.Response(101, headers=headers, extensions={"network_stream": session})

    def _list_pods(self, namespace: str | None, query: dict[str, str]) -> Json:
        want = selector(query.get("labelSelector", ""))
        items = [p for (ns, _), p in self.pods.items()
                 if (namespace is None or ns == namespace)
                 and all(p["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
        return listing("PodList", items, self._rv)

    def _create(self, ns: str, body: Json) -> Json:
        if ns not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found')
        if body.get("kind") != "Pod":
            raise ApiError(400, "BadRequest", "expected a Pod")
        meta = body.get("metadata") or {}
        name = meta.get("name") or ""
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: metadata.name')
        if (ns, name) in self.pods:
            raise ApiError(409, "AlreadyExists", f'pods "{name}" already exists')
        c = _container(body)
        if c is None:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers')
        self._check_resources(name, c.get("resources") or {})
        pod: Json = json.loads(json.dumps(body))
        pod["metadata"].update(namespace=ns, uid=f"uid-{self._next_rv()}",
                               resourceVersion=self._next_rv())
        pod["status"] = {"phase": "Pending"}
        self.pods[(ns, name)] = pod
        if pod["spec"].get("nodeName"):
            self._on_node.setdefault(pod["spec"]["nodeName"], {})[(ns, name)] = None
            self._admit(pod)
        return pod

    def _delete(self, ns: str, name: str, pod: Json) -> Json:
        if (ns, name) in self._terminating:
            return pod
        node = pod["spec"].get("nodeName")
        if self.linger > 0 and node in self.nodes:
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            pod["status"]["phase"] = "Succeeded"  # its resources are freed at once
            self._terminating[(ns, name)] = self.linger
        else:
            self._forget((ns, name))
        self._kubelet(node)
        return pod

    def _bind(self, pod: Json, body: Json) -> Json:
        name = pod["metadata"]["name"]
        if pod["spec"].get("nodeName"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding '
                            f'"{name}": pod {name} is already assigned to node '
                            f'"{pod["spec"]["nodeName"]}"')
        target = (body.get("target") or {}).get("name")
        if body.get("kind") != "Binding" or not target:
            raise ApiError(400, "BadRequest", "expected a Binding with a target node")
        pod["spec"]["nodeName"] = target
        self._on_node.setdefault(target, {})[(pod["metadata"]["namespace"], name)] = None
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self._admit(pod)
        return {"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}

    def _resize(self, pod: Json, body: Json, ctype: str) -> Json:
        name = pod["metadata"]["name"]
        if ctype.split(";")[0] not in ("application/strategic-merge-patch+json",
                                       "application/merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")
        if not pod["spec"].get("nodeName"):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: '
                            "pod resize is only allowed on pods bound to a node")
        patch = [c for c in (body.get("spec") or {}).get("containers") or ()]
        if set(body) - {"spec"} or set(body.get("spec") or {}) - {"containers"} or any(
                set(c) - {"name", "resources"} for c in patch):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec: Forbidden: only '
                            "cpu and memory resources are mutable")
        cur = _container(pod)
        assert cur is not None
        for c in patch:
            if c.get("name") != cur["name"]:
                raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers'
                                f'[name="{c.get("name")}"]: Not found')
        new = json.loads(json.dumps(cur.get("resources") or {}))
        for c in patch:
            for part in ("requests", "limits"):
                new.setdefault(part, {}).update((c.get("resources") or {}).get(part) or {})
        self._check_resources(name, new)
        old = cur.get("resources") or {}
        if _qos(old) != _qos(new):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: metadata: Invalid value:'
                            ' "Guaranteed": Pod QOS Class may not change as a result of resizing')
        policy = {p["resourceName"]: p["restartPolicy"] for p in cur.get("resizePolicy") or ()}
        old_mem = (old.get("limits") or {}).get("memory")
        new_mem = (new.get("limits") or {}).get("memory")
        if (old_mem is not None and new_mem is not None
                and memory_bytes(new_mem) < memory_bytes(old_mem)
                and policy.get("memory", "NotRequired") == "NotRequired"):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers[0]'
                            '.resources.limits[memory]: Forbidden: memory limits cannot be '
                            "decreased unless resizePolicy is RestartContainer")
        cur["resources"] = new
        pod["metadata"]["resourceVersion"] = self._next_rv()
        pod["metadata"]["generation"] = pod["metadata"].get("generation", 1) + 1
        self._kubelet(pod["spec"]["nodeName"])
        return pod

    def _check_resources(self, name: str, res: Json) -> None:
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        try:
            for r, q in list(req.items()) + list(lim.items()):
                (cpu_millis if r == "cpu" else memory_bytes)(q)
        except ValueError as e:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: {e}') from None
        for r in ("cpu", "memory"):
            if r in req and r in lim:
                conv = cpu_millis if r == "cpu" else memory_bytes
                if conv(req[r]) > conv(lim[r]):
                    raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers'
                                    f"[0].resources.requests: Invalid value: \"{req[r]}\": must"
                                    f" be less than or equal to {r} limit of {lim[r]}")

    def _forget(self, key: tuple[str, str]) -> None:
        wipe(self.exec_dir, *key)  # the container's files go with it
        pod = self.pods.pop(key, None)
        if pod is not None:
            self._on_node.get(pod["spec"].get("nodeName") or "", {}).pop(key, None)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)


def _container(pod: Json) -> Json | None:
    cs = (pod.get("spec") or {}).get("containers") or []
    return cs[0] if cs else None


def _qos(res: Json) -> str:
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    if not req and not lim:
        return "BestEffort"
    if all(r in lim and parse_quantity(lim[r]) == parse_quantity(req.get(r, lim[r]))
           for r in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


def emulated_client(emulator: KubeEmulator, namespace: str = "default") -> Any:
    """A real ``lightkube.Client`` whose requests go to ``emulator``."""
    from lightkube import Client, KubeConfig

    return Client(KubeConfig.from_dict(kubeconfig(namespace)), transport=emulator.transport(),
                  trust_env=False)


def kubeconfig(namespace: str = "default", server: str = SERVER) -> Json:
    """A kubeconfig (as a dict) for the emulator, with a bearer token it checks."""
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "merkat", "user": {"token": TOKEN}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "merkat",
                                                      "namespace": namespace}}],
    }
