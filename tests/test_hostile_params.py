"""Hostile controller parameters (a template's ``controller.params``, ``--policy-param``):
each built-in policy declares its parameters (``PARAMS``, ``PARAM_RULES``: control/params.py)
and the registry checks them in one place, so a wrong type, a NaN, a negative where a
positive number is needed or an unknown name is one message naming the parameter — the API
422, ``merkat submit`` exit 2, ``merkat sim run`` exit 2 naming ``--policy-param`` — never a
raw Python message (``'<' not supported between instances of 'list' and 'int'``), and never
accepted to fail later (``t_diff: -1``, ``abort_hopeless: "no"`` taken as true)."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.control.registry import POLICIES, ParamError, check_params, make_policy

runner = CliRunner()

HOSTILE: list[Any] = [-1, -0.5, 0, 0.5, 1, 2, 3.0, 2.5, 10**6 + 1, 10**400, float("nan"),
                      float("inf"), -float("inf"), True, False, None, "x", "", "0.5", "deadline",
                      "share", "ar", [1], {"a": 1}]


def test_every_built_in_policy_declares_each_of_its_parameters() -> None:
    """The declaration is the constructor's keyword parameters, no more, no fewer (a new
    parameter undeclared would go unchecked)."""
    for name, cls in POLICIES.items():
        sig = {p for p, v in inspect.signature(cls).parameters.items()
               if v.kind is inspect.Parameter.KEYWORD_ONLY}
        assert set(cls.PARAMS) == sig, name
        defaults = {p: v.default for p, v in inspect.signature(cls).parameters.items()}
        assert check_params(name, defaults) == defaults, name  # the defaults pass as they are


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_value_the_declaration_accepts_builds_the_controller(name: str) -> None:
    """Whatever ``check_params`` lets through, the constructor takes (no raw TypeError or
    ValueError from inside a policy); whatever it refuses is one ``NAME: must be ...``."""
    for param in POLICIES[name].PARAMS:
        for value in HOSTILE:
            try:
                checked = check_params(name, {param: value})
            except ParamError as exc:
                assert str(exc).startswith(f"{param}: must be "), (param, value, str(exc))
                assert exc.param == param and "\n" not in str(exc)
                continue
            make_policy(name, **checked)
            if isinstance(value, float) and not math.isfinite(value):
                raise AssertionError(f"{name}: {param}={value} accepted")


@pytest.mark.parametrize(("name", "params", "message"), [
    ("scale-one-vm", {"t_diff": -1}, "t_diff: must be a finite number >= 0, got -1"),
    ("scale-one-vm", {"limit": [1]}, "limit: must be an integer in [1, 1000000], got [1]"),
    ("scale-one-vm", {"limit": 2.5}, "limit: must be an integer in [1, 1000000], got 2.5"),
    ("scale-one-vm", {"seed": "abc"}, "seed: must be an integer >= 0, got 'abc'"),
    ("scale-one-vm", {"horizon": 1.5}, "horizon: must be an integer in [1, 1000000], got 1.5"),
    ("framework-horizontal", {"keep_idle": float("nan")},
     "keep_idle: must be a finite number >= 0, got nan"),
    ("vertical-deadline", {"abort_hopeless": "no"}, "abort_hopeless: must be true or false, "
     "got 'no'"),
    ("deadline-strict", {"probability": "x"}, "probability: must be a finite number in (0, 1), "
     "got 'x'"),
    ("deadline-strict", {"low": 2, "high": 1}, "low: must be <= high (1), got 2"),
    ("scale-one-vm", {"tdiff": 1}, "tdiff: policy 'scale-one-vm' has no parameter 'tdiff' (did "
     "you mean 't_diff'?); its parameters are: horizon, limit, seed, start_fraction, t_diff"),
])
def test_the_registry_names_the_parameter(name: str, params: dict[str, Any], message: str) -> None:
    with pytest.raises(ParamError) as info:
        make_policy(name, **params)
    assert str(info.value) == message


def test_valid_parameters_are_taken_as_given() -> None:
    """An integral float of an integer parameter is that integer; the rest is unchanged."""
    assert check_params("scale-one-vm", {"limit": 3.0, "t_diff": 0.1}) == {"limit": 3,
                                                                             "t_diff": 0.1}
    assert type(check_params("scale-one-vm", {"limit": 3.0})["limit"]) is int
    assert check_params("best-effort", {"max_price": None}) == {"max_price": None}
    assert check_params("deadline-strict", {"forecast_horizon": "deadline"})
    assert make_policy("vertical-deadline", abort_hopeless=False).abort_hopeless is False


# --- the simulator: merkat sim run --policy-param ----------------------------------------


@pytest.mark.parametrize(("param", "message"), [
    ("t_diff=-1", "--policy-param t_diff: must be a finite number >= 0, got -1"),
    ("t_diff=nan", "--policy-param t_diff: must be a finite number >= 0, got nan"),
    ("limit=x", "--policy-param limit: must be an integer in [1, 1000000], got 'x'"),
    ("seed=abc", "--policy-param seed: must be an integer >= 0, got 'abc'"),
    ("abort_hopeless=yes", "--policy-param abort_hopeless: must be true or false, got 'yes'"),
])
def test_sim_run_refuses_a_bad_policy_param_naming_the_flag(
        tmp_path: Path, param: str, message: str) -> None:
    """``t_diff=-1`` and ``abort_hopeless=yes`` ran (a negative threshold, ``yes`` taken as
    true); ``limit=x`` said ``'<' not supported between instances of 'str' and 'int'``."""
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "5",
                            "--scheduler", "market", "--policy", "vertical-deadline",
                            "--policy-param", param, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.stderr
    assert r.stderr.strip() == f"error: {message}"
    assert not (tmp_path / "o" / "summary.json").exists()


def test_a_policy_param_given_twice_is_refused(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "5",
                            "--scheduler", "market", "--policy", "vertical-deadline",
                            "--policy-param", "t_diff=0.1", "--policy-param", "t_diff=0.2",
                            "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and r.stderr.strip() == "error: --policy-param t_diff: given twice"


# --- the service: the API (422) and merkat submit (exit 2) --------------------------------

BASE: dict[str, Any] = {"name": "p", "controller": {"policy": "scale-one-vm"}, "budget": "1",
                        "clusters": [{"name": "c", "command": "sleep 60", "cpu": 0.1,
                                      "memory": 32}]}


@pytest.mark.parametrize(("params", "detail"), [
    ({"t_diff": -1}, "controller.params.t_diff: must be a finite number >= 0, got -1"),
    ({"t_diff": "NaN"}, "controller.params.t_diff: must be a finite number >= 0, got 'NaN'"),
    ({"limit": [1]}, "controller.params.limit: must be an integer in [1, 1000000], got [1]"),
    ({"seed": "abc"}, "controller.params.seed: must be an integer >= 0, got 'abc'"),
    ({"bogus": 1}, "controller.params.bogus: policy 'scale-one-vm' has no parameter 'bogus'; "
     "its parameters are: horizon, limit, seed, start_fraction, t_diff"),
])
def test_the_api_refuses_bad_controller_params(world: Any, params: dict[str, Any],
                                               detail: str) -> None:
    """``t_diff: -1`` and ``t_diff: "NaN"`` were queued (the text then failed the controller
    at its first comparison); ``limit: [1]`` was a 422 with Python's own words."""
    c, m, keys = world
    t = json.loads(json.dumps(BASE))
    t["controller"]["params"] = params
    r = c.post("/api/v1/platforms", json=t, headers={"Authorization": f"Bearer {keys['alice']}"})
    assert (r.status_code, r.json()) == (422, {"detail": detail})
    assert m.store.platform("p") is None


def test_the_api_refuses_a_resource_traded_twice(world: Any) -> None:
    c, m, keys = world
    t = {**BASE, "trade": ["cpu", "cpu"]}
    r = c.post("/api/v1/platforms", json=t, headers={"Authorization": f"Bearer {keys['alice']}"})
    assert (r.status_code, r.json()) == (422, {
        "detail": "trade: names 'cpu' more than once; each resource is traded once"})
    assert m.store.platform("p") is None


def test_a_yaml_or_xml_template_names_the_parameter_and_its_line() -> None:
    from merkat.service.templates import TemplateError, parse

    text = ("name: y\ncontroller:\n  policy: vertical-deadline\n  params:\n    t_diff: 0.1\n"
            "    abort_hopeless: 'no'\nbudget: 1\nclusters:\n  - {name: c, command: 'true'}\n")
    with pytest.raises(TemplateError) as info:
        parse(text)
    assert str(info.value) == ("template line 6: controller.params.abort_hopeless: must be "
                               "true or false, got 'no'")
    xml = ("<platform><name>x</name><policy><type>vertical-deadline</type><params>"
           "<abort_hopeless>false</abort_hopeless><t_diff>0.1</t_diff></params></policy>"
           "<budget>1</budget><group name='c'><command>true</command></group></platform>")
    t = parse(xml, fmt="xml")  # an XML text false is the boolean false (it was the text)
    assert t.controller.params == {"abort_hopeless": False, "t_diff": 0.1}


def test_merkat_submit_exits_2_naming_the_parameter(tmp_path: Path) -> None:
    from merkat.service.config import load_config
    from merkat.service.server import Service
    from test_service_e2e import free_port

    key = runner.invoke(app, ["user", "add", "ann", "--budget", "5", "--parsable",
                              "--data-dir", str(tmp_path)]).stdout.strip()
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    template = tmp_path / "t.yaml"
    template.write_text("name: p\ncontroller:\n  policy: scale-one-vm\n  params: {t_diff: -1}\n"
                        "budget: 1\nclusters:\n  - {name: c, command: 'sleep 9'}\n")
    try:
        r = runner.invoke(app, ["submit", str(template), "--no-upload", "--url",
                                f"http://127.0.0.1:{svc.port}", "--token", key])
        assert r.exit_code == 2, r.stderr
        assert r.stderr.strip() == ("error: template line 4: controller.params.t_diff: must be "
                                    "a finite number >= 0, got -1")
        assert svc.manager.store.platform("p") is None
    finally:
        svc.shutdown()
