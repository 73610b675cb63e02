"""Generate the README's table reference from :mod:`schemas.tables`.

``python -m schemas.docs`` rewrites the part of README.md between the
``<!-- tables:begin -->`` and ``<!-- tables:end -->`` markers; ``--check`` exits 1 when the README
is out of date (run by the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

from schemas.tables import FLEET_TABLES, TABLES

BEGIN, END = "<!-- tables:begin -->", "<!-- tables:end -->"


def tables_markdown() -> str:
    """Markdown reference of every warehouse table, in declaration order."""
    return "\n".join(t.markdown() for t in [*TABLES.values(), *FLEET_TABLES.values()])


def render(readme: str) -> str:
    """``readme`` with the generated section replaced.

    Raises:
        ValueError: when the markers are missing.
    """
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README has no {BEGIN} … {END} section")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tables_markdown()}{END}{tail}"


def main(argv: list[str]) -> int:
    path = Path(__file__).resolve().parents[1] / "README.md"
    text = path.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("README.md table reference is out of date: run python -m schemas.docs", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
