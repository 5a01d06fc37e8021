"""What a report holds, independent of where the run came from and of HTML."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ReportError(ValueError):
    """The run cannot be reported (not a run folder, unreadable file...); the message names
    the file or field and is meant for a one-line CLI error."""


@dataclass(frozen=True)
class Table:
    """A table: a caption, column names and rows of plain values (str, int, float, None).
    ``numeric``: numbers right-aligned (columns of figures); False for key-value lists."""

    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    numeric: bool = True


@dataclass(frozen=True)
class Figure:
    """A PNG image and its caption."""

    caption: str
    png: bytes


@dataclass(frozen=True)
class Report:
    """A run as a reader sees it: what ran (``parameters``), what came out (``tables``) and
    the pictures (``figures``). ``kind`` names the source (``sim-run``, ``sim-experiment``,
    ``live``); ``notes`` are short paragraphs (the paper's claim, caveats)."""

    kind: str
    title: str
    parameters: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
