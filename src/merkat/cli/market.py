"""``merkat market ...``: clear a market from a JSON description of hosts and VMs."""

import typer

app = typer.Typer(help="The proportional-share market.", no_args_is_help=True)
