"""The building blocks of a report page: :class:`Section`, :class:`TableView` and the value formatters.

Shared by the page renderer (:mod:`jobs.publish.report.html`) and the section builders
(:mod:`jobs.publish.report.sections`, :mod:`jobs.publish.report.fleet_tables`); imports neither, so the
arrows go html → sections → blocks. Formatters turn a table value into display text (``—`` for missing);
escaping is left to the template (Jinja2 autoescape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from jobs.publish.report.plots import Plot

__all__ = ["TableView", "Section", "unavailable", "fmt_ms", "fmt_us", "fmt_num", "fmt_int", "fmt_text", "table_view"]


@dataclass
class TableView:
    """A table ready to print: header ``columns``, ``kinds`` per column (``num``, ``name`` or ``""``),
    ``rows`` of already formatted strings, ``more`` (e.g. "showing 20 of 311 rows")."""

    key: str
    columns: list[str]
    rows: list[list[str]]
    kinds: list[str]
    caption: str = ""
    more: str = ""


@dataclass
class Section:
    """One report section. ``note`` is shown when data is missing (``plots``/``tables`` empty);
    ``status`` (``passed``/``failed``/…) adds a badge; ``details`` are collapsible text blocks; ``paragraphs``
    are more prose after ``intro``; ``links`` are ``{"href": "#section-key", "text": words}`` within the page."""

    key: str
    title: str
    intro: str = ""
    plots: list[Plot] = field(default_factory=list)
    tables: list[TableView] = field(default_factory=list)
    note: str = ""
    status: str = ""
    details: list[dict] = field(default_factory=list)
    paragraphs: list[str] = field(default_factory=list)
    links: list[dict] = field(default_factory=list)


def unavailable(key: str, title: str, what: str, intro: str = "") -> Section:
    """A section that says its data is not available (never an error)."""
    return Section(key, title, intro=intro, note=f"Not available: {what}", status="unavailable")


# ----------------------------------------------------------------------------- formatting


def _isnull(v) -> bool:
    if v is None or v is pd.NA or v is pd.NaT:
        return True
    try:
        return isinstance(v, float) and math.isnan(v)
    except TypeError:
        return False


def fmt_ms(ns, digits: int = 2) -> str:
    """ns → ``"12.35"`` ms; ``—`` for missing."""
    return "—" if _isnull(ns) else f"{float(ns) / 1e6:,.{digits}f}"


def fmt_us(ns, digits: int = 1) -> str:
    """ns → µs text."""
    return "—" if _isnull(ns) else f"{float(ns) / 1e3:,.{digits}f}"


def fmt_num(v, digits: int = 1) -> str:
    """A number with ``digits`` decimals (integers without); ``—`` for missing."""
    if _isnull(v):
        return "—"
    f = float(v)
    return f"{int(f):,}" if f.is_integer() and digits == 0 else f"{f:,.{digits}f}"


def fmt_smart(v, digits: int = 3) -> str:
    """Integral values without decimals (counts print as counts), others with ``digits``; ``—`` for missing."""
    if _isnull(v):
        return "—"
    f = float(v)
    return f"{int(f):,}" if f.is_integer() else f"{f:,.{digits}f}"


def fmt_int(v) -> str:
    """An integer with thousands separators."""
    return "—" if _isnull(v) else f"{int(v):,}"


def fmt_text(v) -> str:
    """Any value as text (lists and arrays joined by ``, ``); ``—`` for missing."""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if hasattr(v, "tolist") and getattr(v, "ndim", 0) >= 1:
        return ", ".join(str(x) for x in v.tolist())
    return "—" if _isnull(v) else str(v)


def table_view(
    key: str, df: pd.DataFrame, spec: list[tuple], caption: str = "", limit: int | None = None, total: int | None = None
) -> TableView:
    """Format ``df`` into a :class:`TableView`.

    Args:
        spec: ``(column, header, formatter, kind)`` per printed column; ``formatter(value) -> str``;
            kind ``num`` right-aligns, ``name`` prints monospace (trace names).
        limit: print at most this many rows (``more`` says how many there were).
    """
    n = len(df) if total is None else total
    d = df.head(limit) if limit else df
    rows = [[fmt(r.get(col)) for col, _, fmt, _ in spec] for r in d.to_dict(orient="records")]
    more = f"showing {len(d)} of {n} rows" if n > len(d) else ""
    return TableView(key, [h for _, h, _, _ in spec], rows, [k for *_, k in spec], caption, more)
