"""``merkat bench ...``: benchmark commands. Each prints one JSON object on stdout.

Each domain module (market, bank, sim, ...) registers its own ``bench`` subcommand on
:data:`app`, so the benchmarks live next to the CLI of what they measure.
"""

import typer

app = typer.Typer(help="Benchmarks; each prints a JSON object on stdout.", no_args_is_help=True)
