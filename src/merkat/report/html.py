"""A :class:`~merkat.report.model.Report` as one self-contained HTML page.

Every text is escaped; figures are embedded as ``data:image/png;base64`` URIs; the style sheet
is inline. The page loads nothing from the network, so it opens offline and can be mailed.
Same report in, same bytes out (no timestamp unless the source puts one in its parameters).
"""

from __future__ import annotations

import base64
import json
import math
from html import escape
from typing import Any

from merkat.report.model import Report, Table

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 72rem; padding: 0 1rem; color: #1d2330; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.kind { color: #5b6478; font-size: .9rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #d5d9e2; padding: .25rem .6rem; text-align: left; }
th { background: #f0f2f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #e3e6ec; }
div.scroll { overflow-x: auto; }
figcaption { color: #5b6478; font-size: .85rem; }
p.note { background: #f7f8fa; border-left: 3px solid #8aa1d1; padding: .4rem .8rem; }
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and abs(v) < 1e-3:
            return f"{v:.3g}"
        return f"{v:,.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=str)
    return str(v)


def _cell(v: Any, numeric: bool) -> str:
    num = numeric and isinstance(v, (int, float)) and not isinstance(v, bool)
    cls = ' class="num"' if num else ""
    return f"<td{cls}>{escape(_fmt(v))}</td>"


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in t.columns)
    body = "\n".join("<tr>" + "".join(_cell(v, t.numeric) for v in row) + "</tr>" for row in t.rows)
    return (
        f'<h2>{escape(t.caption)}</h2>\n<div class="scroll"><table>\n'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div>"
    )


def render(report: Report) -> str:
    """The report as an HTML5 document (a ``str``; write it as UTF-8)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(report.title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head><body>",
        f"<h1>{escape(report.title)}</h1>",
        f'<div class="kind">merkat report · {escape(report.kind)}</div>',
    ]
    parts += [f'<p class="note">{escape(n)}</p>' for n in report.notes]
    for k, fig in enumerate(report.figures):
        data = base64.b64encode(fig.png).decode("ascii")
        parts.append(
            f'<figure id="figure-{k + 1}"><img alt="{escape(fig.caption)}" '
            f'src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(fig.caption)}</figcaption></figure>"
        )
    parts += [_table(t) for t in report.tables]
    params = Table("Parameters", ("parameter", "value"), tuple(report.parameters.items()), False)
    parts.append(_table(params))
    parts.append("</body></html>\n")
    return "\n".join(parts)
