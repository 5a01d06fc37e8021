"""``merkat policy list``: the controller policies by name, what they drive, what they read,
and their parameters with defaults.

``-o json``: ``{"items": [{"name", "applies_to", "needs", "parameters"}]}``; ``applies_to``
holds ``trace`` for the policies ``merkat sim run --scheduler market --policy`` accepts.
"""

from __future__ import annotations

from typing import Any

import typer

from merkat.cli._common import OutputFormat, OutputOption, emit, print_table

app = typer.Typer(help="Controller policies (SLO and scaling), by name.", no_args_is_help=True)


def policy_items() -> list[dict[str, Any]]:
    """One entry per registered policy, sorted by name."""
    from merkat.control.registry import POLICIES, policy_params

    items = []
    for name in sorted(POLICIES):
        cls = POLICIES[name]
        params = {k: v for k, v in policy_params(name).items() if k != "seed"}
        items.append(
            {
                "name": name,
                "applies_to": list(cls.applies_to),
                "needs": cls.needs,
                "parameters": params,
            }
        )
    return items


def trace_policies() -> list[str]:
    """The policies usable on the rigid jobs of a trace (``applies_to`` holds ``trace``)."""
    return [i["name"] for i in policy_items() if "trace" in i["applies_to"]]


@app.command("list")
def list_cmd(output: OutputFormat = OutputOption) -> None:
    """Every policy: what it applies to (trace: usable by `sim run`), what it reads, its
    parameters and their defaults."""
    items = policy_items()
    cols = ["name", "applies_to", "needs", "parameters"]
    rows = [
        [
            i["name"],
            ", ".join(i["applies_to"]),
            i["needs"],
            " ".join(f"{k}={v}" for k, v in i["parameters"].items()),
        ]
        for i in items
    ]
    emit(output, {"items": items}, lambda: print_table(None, cols, rows))
