"""Bounded answers: every list a tool returns is cut to a row limit and a character cap, with a cursor.

A cursor is opaque to the client: the offset of the next row and a fingerprint of the question
(tool and arguments other than ``cursor``/``limit``), so that a cursor is refused on another question.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TypeVar

import pydantic_core

from schemas.agent import MAX_ANSWER_CHARS, Page

M = TypeVar("M")

#: Rows a tool returns when the client gives no ``limit``, and the most it may ask for.
DEFAULT_LIMIT, MAX_LIMIT = 50, 500


#: The longest cursor decoded.
MAX_CURSOR_CHARS = 200


class BadCursor(ValueError):
    """A ``cursor`` that is malformed or belongs to another question."""


def fingerprint(tool: str, args: dict) -> str:
    """12 hex digits naming the question ``tool(**args)`` (``cursor`` and ``limit`` left out)."""
    key = {k: v for k, v in sorted(args.items()) if k not in ("cursor", "limit")}
    return hashlib.sha256(json.dumps([tool, key], sort_keys=True, default=str).encode()).hexdigest()[:12]


def encode_cursor(offset: int, question: str) -> str:
    """The cursor of row ``offset`` of ``question`` (a :func:`fingerprint`)."""
    return base64.urlsafe_b64encode(json.dumps({"o": offset, "q": question}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, question: str) -> int:
    """The offset a cursor points at (0 for none).

    Raises:
        BadCursor: not a cursor of this server, or one of another question.
    """
    if not cursor:
        return 0
    if len(cursor) > MAX_CURSOR_CHARS:  # this server's cursors are ~60 characters: a forged one is not decoded
        raise BadCursor(f"cursor of {len(cursor)} characters is not a cursor of this server")
    try:
        doc = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        offset, q = int(doc["o"]), str(doc["q"])
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise BadCursor(f"cursor {cursor[:40]!r} is not a cursor of this server") from e
    if q != question:
        raise BadCursor("cursor belongs to another question (tool or arguments changed); start without a cursor")
    if offset < 0:
        raise BadCursor(f"cursor offset {offset} is negative")
    return offset


def answer_chars(answer) -> int:
    """Characters of ``answer`` (a pydantic model) as a client receives it: the SDK's text content, JSON
    indented by 2 (the structured copy is the same JSON without the indentation, so shorter)."""
    return len(pydantic_core.to_json(answer, indent=2))


def clamp_limit(limit: int | None) -> int:
    """``limit`` within 1 … :data:`MAX_LIMIT` (default :data:`DEFAULT_LIMIT`)."""
    return DEFAULT_LIMIT if limit is None else max(1, min(int(limit), MAX_LIMIT))


def bounded(
    rows: Sequence,
    build: Callable[[list, Page], M],
    question: str,
    cursor: str | None,
    limit: int | None,
    max_chars: int = MAX_ANSWER_CHARS,
) -> M:
    """The answer ``build(page_rows, page)`` for the rows from the cursor on: at most ``limit`` rows, and
    fewer while it exceeds ``max_chars`` characters (:func:`answer_chars`; at least one row, so every page
    makes progress).

    ``build`` returns a pydantic model; the one returned is the largest page that fits.

    Raises:
        BadCursor: see :func:`decode_cursor`.
    """
    offset = min(decode_cursor(cursor, question), len(rows))
    n = min(clamp_limit(limit), len(rows) - offset)

    def make(k: int) -> M:
        more = offset + k < len(rows)
        page = Page(
            total=len(rows),
            offset=offset,
            returned=k,
            truncated=more,
            next_cursor=encode_cursor(offset + k, question) if more else None,
        )
        return build(list(rows[offset : offset + k]), page)

    answer = make(n)
    if n <= 1 or answer_chars(answer) <= max_chars:
        return answer
    lo, hi = 1, n - 1  # the largest k that fits: binary search (each probe builds and measures one answer)
    best = make(1)
    while lo <= hi:
        mid = (lo + hi) // 2
        cand = make(mid)
        if answer_chars(cand) <= max_chars:
            best, lo = cand, mid + 1
        else:
            hi = mid - 1
    return best
