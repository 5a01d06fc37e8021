"""Example payloads: the programs the demo's, the examples' and the tests' templates run inside
their VMs (``python -m merkat.examples.solver``, ``python -m merkat.examples.taskfarm``). They
use only the standard library and nothing else of merkat, so any interpreter that can import
the package runs them (docs/service.md, "Examples")."""
