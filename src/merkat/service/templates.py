"""Virtual platform templates (Merkat §4.1.1, §4.2.1, Fig. 5), in YAML or Merkat's XML.

Both parse into one validated :class:`Template`; errors raise :class:`TemplateError` naming
the field (``clusters.0.cpu: Input should be greater than 0``) and, for files, the line.
A template holds the platform's name, its controller (a policy by registry name — or by a
``merkat.controllers`` entry point of an installed package — its ``reference``: the deadline
in seconds after submission, and its parameters), budget and renewal, keep-idle, the monitor
poll period and its virtual clusters. Decisions (docs/service.md):

- the platform's VMs are its clusters' VMs, in dependency order (masters first); the market
  sees one VM size, the controlled cluster's (``controller: true``, else the first); VMs a
  horizontal controller adds join the last cluster (the workers);
- ``process: true`` marks the cluster whose first VM runs the monitored process: when it exits
  with status 0 the platform's work is done (default: the controlled cluster);
- a monitor reads :class:`~merkat.control.types.Metrics` fields: ``log`` matches ``regex``
  (named groups ``work_done``, ``work_total``, ``performance``, ``tasks_left``...) on the VM's
  output or ``path``; ``command`` runs ``command`` every ``poll`` seconds and reads the same
  names from its ``key=value`` or JSON output; ``push`` waits for POST .../metrics.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from merkat.service.limits import DEFAULT as DEFAULT_LIMITS
from merkat.service.limits import (
    InputError,
    LimitsConfig,
    check_finite,
    clip,
    compose_yaml,
    nul_at,
    nul_message,
)
from merkat.service.template_errors import TemplateError as TemplateError
from merkat.service.template_state import State
from merkat.service.template_xml import from_xml

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
METRIC_FIELDS = ("performance", "reference", "work_done", "work_total", "progress_rate",
                 "ideal_rate", "tasks_left", "task_time_avg", "task_time_max")


MAX_DEADLINE = 10 * 365 * 86400.0
"""The longest ``controller.reference`` (s after submission: ten years). Unbounded, ``1e300``
made a deadline no clock can print: the owner's (and an admin's) ``merkat platform list``
failed with ``OverflowError`` and the ``deadline-met`` event held a 300-digit number."""

MIN_POLL = 1.0
"""The shortest ``poll`` a template may ask for (s): command monitors run no more often."""


class _Strict(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}


class Monitor(_Strict):
    """How the controller learns the application's progress (Merkat §4.2.3)."""

    kind: Literal["log", "command", "push"] = "log"
    regex: str | None = None
    path: str | None = None
    command: str | None = None
    ideal_rate: float | None = Field(None, gt=0)  # work units/s at the full VM size

    @field_validator("regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            from merkat.service.patterns import RegexError, compile_regex

            try:  # RE2: linear time in the text, whatever the pattern (docs/service.md)
                rx = compile_regex(v)
            except RegexError as exc:
                raise ValueError(str(exc)) from None
            unknown = set(rx.groupindex) - set(METRIC_FIELDS)
            if unknown:
                raise ValueError(f"unknown metric group(s) {sorted(unknown)}; "
                                 f"known: {', '.join(METRIC_FIELDS)}")
        return v

    @model_validator(mode="after")
    def _kind(self) -> Monitor:
        if self.kind == "log" and not self.regex:
            raise ValueError("a log monitor needs a regex")
        if self.kind == "command" and not self.command:
            raise ValueError("a command monitor needs a command")
        return self


class Bid(_Strict):
    cpu: float = Field(0.0, ge=0)
    memory: float = Field(0.0, ge=0)


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_ENV = 64
MAX_ENV_VALUE = 4096


def _env(v: dict[str, str]) -> dict[str, str]:
    """A cluster's ``env``: at most 64 variables, names of letters, digits and ``_`` (not
    ``MERKAT_*`` nor ``HOME``: the server's), values of at most 4096 characters, no NUL."""
    if len(v) > MAX_ENV:
        raise ValueError(f"at most {MAX_ENV} variables")
    for k, x in v.items():
        if not ENV_NAME.match(k):
            raise ValueError(f"{k!r} is not a variable name (letters, digits, _)")
        if k.startswith("MERKAT_") or k == "HOME":
            raise ValueError(f"{k} is set by the server")
        if len(x) > MAX_ENV_VALUE or "\0" in x:
            raise ValueError(f"{k}: at most {MAX_ENV_VALUE} characters, no NUL")
    return v


def _relative(v: list[str]) -> list[str]:
    """``files_in``: names relative to the user's uploaded files (no absolute path, no ``..``)."""
    if len(v) > 100:
        raise ValueError("at most 100 files")
    for f in v:
        if not f or f.startswith("/") or "\0" in f or ".." in f.split("/") or len(f) > 1024:
            raise ValueError(f"{f!r}: a relative name without '..' (files_in: a file you "
                             "uploaded with `merkat file put`)")
    return v


class Cluster(_Strict):
    """A virtual cluster: ``count`` VMs running ``command``, each at most ``cpu`` cores and
    ``memory`` MiB, needing at least ``min_memory`` MiB on its node."""

    name: str = Field(pattern=NAME)
    command: str = Field(min_length=1)
    count: int = Field(1, ge=1, le=1000)
    cpu: float = Field(1.0, gt=0, le=4096)
    memory: float = Field(256.0, gt=0, le=2**30)
    min_cpu: float = Field(0.0, ge=0)
    min_memory: float = Field(0.0, ge=0)
    bid: Bid | None = None
    files_in: list[str] = Field(default_factory=list)
    files_out: list[str] = Field(default_factory=list)
    depends: str | None = None
    controller: bool = False
    process: bool = False
    monitor: Monitor | None = None
    poll: float | None = Field(None, ge=0, le=86400)  # its monitor's interval, s (None: the
    # template's poll; 0: never read; else at least MIN_POLL)
    pids: int | None = Field(None, ge=8, le=4_194_304)  # the VM's pids.max (server default)
    env: dict[str, str] = Field(default_factory=dict)  # added to the VM's clean environment
    state: State | None = None  # kept across suspension/migration (kubernetes; template_state)
    # kubernetes: a memory decrease restarts the container (resizePolicy RestartContainer) or
    # is not applied (in-place: NotRequired memory cannot shrink; docs/kubernetes.md)
    memory_resize: Literal["in-place", "restart"] = "in-place"

    _check_env = field_validator("env")(_env)
    _check_files_in = field_validator("files_in")(_relative)

    @field_validator("files_out")
    @classmethod
    def _out(cls, v: list[str]) -> list[str]:
        return _relative(v)

    @model_validator(mode="after")
    def _mins(self) -> Cluster:
        if self.poll is not None and 0 < self.poll < MIN_POLL:
            raise ValueError(f"poll must be 0 (never read) or at least {MIN_POLL:g} s")
        if self.min_memory > self.memory:
            raise ValueError("min_memory must not exceed memory")
        if self.min_cpu > self.cpu:
            raise ValueError("min_cpu must not exceed cpu")
        return self


class ControllerSpec(_Strict):
    """The controller: ``policy`` by name, ``reference`` (deadline, s after submission)."""

    policy: str = Field(min_length=1, max_length=100)
    reference: float | None = Field(None, gt=0, le=MAX_DEADLINE)
    params: dict[str, Any] = Field(default_factory=dict)


class Commands(_Strict):
    """Per-platform plugins (Merkat §4.3): shell commands run on these events."""

    start: str | None = None
    suspend: str | None = None
    resume: str | None = None
    monitor: str | None = None
    stop: str | None = None


class Health(_Strict):
    """The heartbeat (Merkat §4.2.3): a VM whose cluster's monitor shows no progress for
    ``stall_s`` seconds is restarted like a failed one (None: off)."""

    stall_s: float | None = Field(default=None, gt=0, le=7 * 86400)


class Template(_Strict):
    """A virtual platform template (module doc)."""

    name: str = Field(pattern=NAME)
    controller: ControllerSpec
    budget: float = Field(ge=0, le=1e12)
    renewal: float = Field(0.0, ge=0, le=1e12)
    keep_idle: float = Field(0.0, ge=0, le=7 * 86400)  # s an idle VM is kept (horizontal)
    poll: float = Field(10.0, ge=MIN_POLL, le=86400)  # the monitors' interval (s)
    trade: list[Literal["cpu", "memory"]] = Field(default_factory=lambda: ["cpu", "memory"])  # type: ignore[arg-type]

    @field_validator("trade")
    @classmethod
    def _trade_once(cls, v: list[str]) -> list[str]:
        """Each resource once: ``[cpu, cpu]`` traded the CPU twice (two bids, two bills)."""
        twice = sorted({r for r in v if v.count(r) > 1})
        if twice:
            raise ValueError(f"names {', '.join(map(repr, twice))} more than once; each "
                             "resource is traded once")
        return v
    clusters: list[Cluster] = Field(min_length=1)
    commands: Commands = Field(default_factory=Commands)
    health: Health = Field(default_factory=Health)

    @field_validator("budget", "renewal", mode="before")
    @classmethod
    def _amount_text(cls, v: Any) -> Any:
        """An amount given as text follows the bank's grammar (``merkat.bank.money``: ASCII
        digits, one optional point; no ``1_0``, exponent or non-ASCII digit)."""
        if isinstance(v, str):
            from merkat.bank.errors import InvalidInput
            from merkat.bank.money import parse_amount

            try:
                return parse_amount(v, allow_zero=True) / 1e6
            except InvalidInput as exc:
                raise ValueError(str(exc).removeprefix("amount: ")) from None
        if isinstance(v, float | int) and not isinstance(v, bool):
            from decimal import Decimal

            d = Decimal(repr(v))  # as written: 0.1, 1e-07 (the bank counts micro-credits)
            if d.is_finite() and abs(d) < 10**15 and d != d.quantize(Decimal("0.000001")):
                raise ValueError(f"at most 6 decimals (1 micro-credit): {v!r}")
        return v

    @model_validator(mode="after")
    def _graph(self) -> Template:
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError("cluster names must be unique")
        for c in self.clusters:
            if c.depends is not None:
                if c.depends not in names:
                    raise ValueError(f"cluster {c.name!r} depends on unknown cluster {c.depends!r}")
                if c.depends == c.name:
                    raise ValueError(f"cluster {c.name!r} depends on itself")
                master = self.clusters[names.index(c.depends)]
                if master.depends is not None:
                    raise ValueError(f"cluster {c.name!r}: only one level of dependency "
                                     "(its master depends on another cluster)")
        if sum(c.controller for c in self.clusters) > 1:
            raise ValueError("at most one cluster has controller: true")
        if sum(c.process for c in self.clusters) > 1:
            raise ValueError("at most one cluster has process: true")
        if not self.trade:
            raise ValueError("trade must name at least one resource")
        return self

    # --- derived ---------------------------------------------------------------------------

    def ordered(self) -> list[Cluster]:
        """The clusters in start order: masters (no ``depends``) first."""
        return [c for c in self.clusters if c.depends is None] + [
            c for c in self.clusters if c.depends is not None]

    @property
    def controlled(self) -> Cluster:
        return next((c for c in self.clusters if c.controller), self.clusters[0])

    @property
    def monitored(self) -> Cluster:
        return next((c for c in self.clusters if c.process), self.controlled)

    @property
    def size(self) -> int:
        return sum(c.count for c in self.clusters)

    def cluster_of(self, index: int) -> tuple[Cluster, int]:
        """The cluster of the platform's ``index``-th VM and its index within that cluster
        (extra VMs join the last cluster)."""
        for c in self.ordered():
            if index < c.count:
                return c, index
            index -= c.count
        last = self.ordered()[-1]
        return last, last.count + index


def parse(text: str, source: str = "template", fmt: str | None = None,
          limits: LimitsConfig = DEFAULT_LIMITS) -> Template:
    """A :class:`Template` from YAML or XML ``text`` (XML when ``fmt == "xml"`` or the text
    starts with ``<``). ``source`` names the file in errors. YAML is read within ``limits``
    (nodes with aliases expanded, depth: :mod:`merkat.service.limits`)."""
    fmt = fmt or ("xml" if text.lstrip().startswith("<") else "yaml")
    if fmt == "xml":
        data = from_xml(text, source)
        lines: Any = None
    else:
        data, lines = _yaml(text, source, limits)
    return validate(data, source, lines)


def load(path: Path) -> Template:
    """Read and validate the template file ``path`` (``.xml`` files as XML)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TemplateError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TemplateError(f"{path}: not a text file") from None
    return parse(text, str(path), "xml" if str(path).endswith(".xml") else None)


def validate(data: Any, source: str = "template", lines: Any = None) -> Template:
    """Validate a parsed mapping; errors name the field (and its line when known)."""
    if not isinstance(data, dict):
        raise TemplateError(f"{source}: expected a mapping at the top level")
    nul = nul_at(data)  # (a command with one made every period fail: ValueError)
    if nul is not None:
        line = _line_of(lines, nul) if lines is not None else None
        where = f"{source} line {line}" if line else source
        raise TemplateError(f"{where}: {nul_message(nul)}")
    try:
        t = Template.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # A misspelt key (``polcy:``) is named first, not the field it leaves missing.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = [x for x in err["loc"]]
        field = clip(".".join(str(x) for x in loc), 200) or "(top)"
        msg = clip(err["msg"].removeprefix("Value error, "), 300)
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(loc, errors)
        line = _line_of(lines, loc) if lines is not None else None
        where = f"{source} line {line}" if line else source
        raise TemplateError(f"{where}: {field}: {msg}") from None
    try:  # NaN/inf parameters would fail at admission: refuse them here
        check_finite(t.controller.params, "controller.params")
    except InputError as exc:
        raise TemplateError(f"{source}: {exc}") from None
    _check_params(t, source, lines)
    return t


def _check_params(t: Template, source: str, lines: Any) -> None:
    """A built-in policy's ``controller.params`` checked against its declaration
    (:func:`merkat.control.registry.check_params`: an unknown name, a wrong type, a value out
    of range), naming ``controller.params.NAME`` and its line. A plugin's (a
    ``merkat.controllers`` entry point) are its constructor's to check, at submission."""
    from merkat.control.registry import POLICIES, ParamError, check_params

    if t.controller.policy not in POLICIES:
        return
    try:
        check_params(t.controller.policy, t.controller.params)
    except ParamError as exc:
        line = _line_of(lines, ["controller", "params", exc.param]) if lines is not None else None
        where = f"{source} line {line}" if line else source
        raise TemplateError(f"{where}: controller.params.{clip(str(exc), 400)}") from None


def _unknown_key(loc: list[Any], errors: list[Any]) -> str:
    """The message for the unknown key at ``loc``: the key, and the closest known key (one
    left missing at the same place first: ``polcy`` → ``policy``)."""
    import difflib

    model: Any = Template
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        model = _model_of(field.annotation) if field is not None else None
        if model is None:
            break
    known = list(model.model_fields) if model is not None else []
    missing = [str(e["loc"][-1]) for e in errors
               if e["type"] == "missing" and list(e["loc"][:-1]) == loc[:-1]]
    key = str(loc[-1])
    close = (difflib.get_close_matches(key, missing, 1, 0.5)
             or difflib.get_close_matches(key, known, 1, 0.6))
    hint = f" (did you mean {close[0]!r}?)" if close else (
        f" (known: {', '.join(known)})" if known else "")
    return f"unknown key{hint}"


def _model_of(annotation: Any) -> Any:
    """The pydantic model inside ``annotation`` (``Cluster``, ``list[Cluster]``,
    ``Monitor | None``), or None."""
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _yaml(text: str, source: str, limits: LimitsConfig) -> tuple[Any, Any]:
    try:
        return compose_yaml(text, limits)
    except InputError as exc:
        raise TemplateError(f"{source}{exc}") from None


def _line_of(node: Any, loc: list[Any]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (the deepest that exists)."""
    import yaml

    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            nxt = node.value[key]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
        line = node.start_mark.line + 1
    return line
