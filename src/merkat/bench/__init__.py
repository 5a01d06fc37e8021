"""Every benchmark behind ``merkat bench ...``, one module each: the run and the JSON object it
returns (docs/benchmarks.md). The CLI (``merkat.cli.bench*``) only parses the flags, calls the
module and prints what it returns. Heavy libraries are imported by the module that runs."""
