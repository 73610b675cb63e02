"""Read a tracelake HTML page as a person reads it: its tiles, tables, sections and prose (standard library only).

Used on Chromium's rendered DOM (``--dump-dom``) and on the page files themselves; knows the structure of
``jobs/publish/report/templates/report.html.j2`` (``.card``, ``table[data-table]``, ``section[id]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

#: Elements whose text is prose a person reads as sentences and labels (not data cells, not raw evidence).
PROSE_TAGS = ("p", "h1", "h2", "caption", "th", "figcaption", "summary", "a")


@dataclass
class Table:
    """One ``table[data-table]``: its column headers and its rows of cell texts."""

    key: str
    caption: str = ""
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def column(self, header_prefix: str) -> list[str]:
        """The cells of the first column whose header starts with ``header_prefix``."""
        i = next(i for i, h in enumerate(self.headers) if h.startswith(header_prefix))
        return [r[i] for r in self.rows]

    def records(self) -> list[dict[str, str]]:
        """The rows as ``{header: cell}``."""
        return [dict(zip(self.headers, r)) for r in self.rows]


@dataclass
class Section:
    """One ``section[id]``: its badge status (``ok``, ``findings``, …), its prose and its tables' keys."""

    key: str
    status: str = ""
    prose: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)


class Page(HTMLParser):
    """A parsed report page: ``title``, ``subtitle``, ``cards`` (label → value text), ``tables`` (key →
    :class:`Table`), ``sections`` (id → :class:`Section`), ``prose`` (texts of :data:`PROSE_TAGS`, the tiles'
    labels and the header's subtitle) and ``text`` (every visible text but ``<pre>`` evidence)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.subtitle = ""
        self.cards: dict[str, str] = {}
        self.tables: dict[str, Table] = {}
        self.sections: dict[str, Section] = {}
        self.prose: list[str] = []
        self.text: list[str] = []
        self._stack: list[tuple[str, dict]] = []
        self._buf: dict[int, list[str]] = {}
        self._card: dict[str, str] = {}
        self._table: Table | None = None
        self._row: list[str] | None = None
        self._section: Section | None = None
        self.feed(html)
        self.close()

    # ------------------------------------------------------------------ HTMLParser
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("br", "img", "meta", "input", "hr", "link"):
            return
        self._stack.append((tag, a))
        self._buf[len(self._stack)] = []
        if tag == "section" and a.get("id"):
            self._section = self.sections.setdefault(a["id"], Section(a["id"]))
        elif tag == "table" and a.get("data-table"):
            self._table = self.tables.setdefault(a["data-table"], Table(a["data-table"]))
            if self._section is not None:
                self._section.tables.append(a["data-table"])
        elif tag == "tr":
            self._row = []
        elif tag == "span" and "badge" in (a.get("class") or "") and self._section is not None:
            self._section.status = (a.get("class") or "").replace("badge", "").strip()

    def handle_endtag(self, tag):
        if not self._stack or self._stack[-1][0] != tag:
            if tag not in [t for t, _ in self._stack]:
                return
            while self._stack and self._stack[-1][0] != tag:  # close what the author left open
                self._close()
        self._close()

    def handle_data(self, data):
        if not self._stack:
            return
        tags = [t for t, _ in self._stack]
        if any(t in ("script", "style", "title") for t in tags):
            if tags[-1] == "title":
                self.title += data
            return
        for depth in self._buf:
            self._buf[depth].append(data)
        if "pre" not in tags and data.strip():
            self.text.append(data.strip())

    def _close(self):
        depth = len(self._stack)
        tag, a = self._stack.pop()
        text = re.sub(r"\s+", " ", "".join(self._buf.pop(depth, []))).strip()
        cls = a.get("class") or ""
        if tag in PROSE_TAGS and text:
            self.prose.append(text)
            if self._section is not None and tag != "th":
                self._section.prose.append(text)
        if tag == "p" and "sub" in cls.split():
            self.subtitle = text
        if tag == "div" and cls == "v":
            self._card["v"] = text
        elif tag == "div" and cls == "k":
            self._card["k"] = text
            self.prose.append(text)
        elif tag == "div" and cls == "card":
            self.cards[self._card.get("k", "")] = self._card.get("v", "")
            self._card = {}
        elif tag == "caption" and self._table is not None:
            self._table.caption = text
        elif tag == "th" and self._table is not None:
            self._table.headers.append(text)
        elif tag == "td" and self._row is not None:
            self._row.append(text)
        elif tag == "tr" and self._table is not None and self._row:
            self._table.rows.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "section":
            self._section = None

    # ------------------------------------------------------------------ reading
    def card(self, label_prefix: str) -> str:
        """The value of the first tile whose label starts with ``label_prefix``.

        Raises:
            KeyError: no such tile (the message lists the tiles).
        """
        for k, v in self.cards.items():
            if k.startswith(label_prefix):
                return v
        raise KeyError(f"no tile {label_prefix!r} among {list(self.cards)}")
