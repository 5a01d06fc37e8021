"""``python -m merkat`` is the ``merkat`` command."""

from merkat.cli import main

main()
