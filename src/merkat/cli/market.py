"""``merkat market ...``: clear a market from a JSON description of hosts and VMs."""

from __future__ import annotations

from pathlib import Path

import typer

from merkat.cli import bench
from merkat.cli._common import OutputFormat, OutputOption, emit, fail, print_json, print_table
from merkat.cli.validate import check_int

app = typer.Typer(help="The proportional-share market.", no_args_is_help=True)


@app.command("clear")
def clear_cmd(
    file: Path = typer.Argument(..., help="Market description (JSON): hosts, VMs and bids."),
    output: OutputFormat = OutputOption,
) -> None:
    """Clear one period: prices, ideal and enforceable allocations, placement, migrations."""
    from merkat.market import MarketError, clear
    from merkat.market.io import MAX_BYTES, clearing_to_dict, decode_market, parse_market

    try:
        with file.open("rb") as fh:  # bounded: /dev/zero or a huge file is refused, not read
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        fail(f"{file}: cannot read: {exc.strerror or exc}")
    try:
        hosts, vms, reserve, params = parse_market(decode_market(raw))
        result = clear(hosts, vms, reserve_price=reserve, params=params)
    except MarketError as exc:
        fail(f"{file}: {exc}")
    doc = clearing_to_dict(hosts, vms, result)

    def table() -> None:
        p = doc["prices"]
        print_table(
            "prices (credits per unit per period)",
            ["cpu", "memory"],
            [[p["cpu"], p["memory"]]],
        )
        print_table(
            "allocations",
            ["vm", "host", "ideal cpu", "cpu", "ideal memory", "memory", "error"],
            [
                [
                    v["id"],
                    v["host"],
                    v["ideal"]["cpu"],
                    v["allocation"]["cpu"],
                    v["ideal"]["memory"],
                    v["allocation"]["memory"],
                    None if v["error"] is None else f"{100 * v['error']:.1f} %",
                ]
                for v in doc["vms"]
            ],
        )
        print_table(
            "migrations",
            ["vm", "from", "to"],
            [[m["vm"], m["from"], m["to"]] for m in doc["migrations"]],
        )

    emit(output, doc, table)


@bench.app.command("market")
def bench_market(
    vms: int = typer.Option(100_000, "--vms", help="Number of VMs, in [1, 1,000,000]."),
    hosts: int = typer.Option(10_000, "--hosts", help="Number of hosts, in [1, 100,000]."),
    seed: int = typer.Option(0, "--seed", help="Random seed of the generated cluster."),
    placed: float = typer.Option(
        0.5, "--placed", min=0.0, max=1.0, help="Fraction of VMs already on a (random) host."
    ),
) -> None:
    """Time one full clear of a random cluster: allocate, place, balance."""
    from merkat.bench.market import run

    # the sizes docs/benchmarks.md measures at most (10^8 VMs filled 24 GiB before any clear)
    check_int("--vms", vms, 1, 1_000_000)
    check_int("--hosts", hosts, 1, 100_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    print_json(run(vms, hosts, seed, placed))
