"""The monitors' regular expressions, in RE2 (``google-re2``): matching time linear in the
text whatever the pattern (docs/service.md).

:func:`compile_regex` is the one way a pattern is compiled: by the template's validation at
submit (:mod:`merkat.service.templates`: a pattern RE2 does not run is refused there) and by
the monitor that reads a log (:mod:`merkat.service.monitors`). Compiled patterns are cached.
"""

from __future__ import annotations

import functools
from typing import Any


class RegexError(ValueError):
    """A pattern the linear-time engine cannot run (or not a pattern at all)."""


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear-time matching); :class:`RegexError` when RE2 does
    not support it (backreferences, lookaround...) or it is not a regular expression."""
    import re2

    options = re2.Options()
    options.log_errors = False  # (else RE2 prints every refused pattern on stderr)
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise RegexError("not a regular expression the linear-time engine (RE2) runs: "
                         f"{why}") from None
