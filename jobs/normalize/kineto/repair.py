"""Lenient repair of almost-JSON trace documents (used only after a strict parse failed).

Two defects are seen in real profiler output (``../shared/reference/bug_cases.md`` B01, B02):

* non-finite numbers written as bare tokens — libkineto printed ``inf`` for the bandwidth of a
  zero-length copy, Python's ``json`` writes ``NaN``/``Infinity``/``-Infinity``, C's printf
  ``nan``/``-nan``/``inf``/``-inf``. Every spelling of :data:`NONFINITE_TOKENS`, optionally signed,
  in any value position becomes ``null`` (flag ``nonfinite_number``): a bandwidth of a zero-length
  copy is undefined, not infinite;
* raw control characters (U+0000–U+001F) inside strings — an unescaped newline or ``\\x01`` in a
  ``python_function`` name or a stack string. Each becomes its ``\\u00XX`` escape (flag
  ``control_characters``), so the decoded string keeps the character and the event is kept.

Both are repaired outside/inside string literals only; everything else is left byte for byte.
The native scanner (``_kineto_scan.c``) applies the same two repairs while it scans, with the same
counts and offsets.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["repair_json", "repair_text", "worth_repairing", "NONFINITE_TOKENS", "REPAIR_FLAGS"]

#: Spellings of non-finite numbers repaired to ``null`` (each may carry a leading ``-``).
NONFINITE_TOKENS = ("NaN", "nan", "NAN", "Infinity", "infinity", "INFINITY", "inf", "Inf", "INF")
#: Flag names of the repairs, in the order of :func:`repair_text`'s counts.
REPAIR_FLAGS = ("nonfinite_number", "control_characters")

# A bare non-finite token (whether it is outside strings is decided from the quotes).
_NONFINITE = re.compile(rb"(?<![A-Za-z0-9_.])-?(?:" + "|".join(NONFINITE_TOKENS).encode() + rb")(?![A-Za-z0-9_])")
_MALFORMED_AT = re.compile(r"invalid character \(byte (\d+)\)")


def _quotes(b: np.ndarray) -> np.ndarray:
    """Positions of the ``"`` that open or close strings in ``b`` (text that starts outside a
    string): every ``"`` not preceded by an odd run of backslashes."""
    q = np.flatnonzero(b == 0x22)
    if not q.size:
        return q
    bs = np.flatnonzero(b == 0x5C)
    if not bs.size:
        return q
    brk = np.flatnonzero(np.diff(bs) != 1) + 1
    starts = np.concatenate(([0], brk))
    run_end = bs[np.concatenate((brk - 1, [bs.size - 1]))] + 1  # index after each backslash run
    run_len = run_end - bs[starts]
    k = np.searchsorted(run_end, q)
    hit = k < run_end.size
    hit[hit] = run_end[k[hit]] == q[hit]
    escaped = np.zeros(q.size, bool)
    escaped[hit] = (run_len[k[hit]] & 1) == 1
    return q[~escaped]


def repair_text(doc, base: int = 0) -> tuple[bytes, dict[str, int], int | None]:
    """Repair non-finite tokens and raw control characters (see the module docstring).

    Vectorized: string literals are located from the unescaped quotes (numpy), control bytes inside
    them and non-finite tokens outside them are the repair sites; only the sites are visited in
    Python (a few MB/s would otherwise be spent in a per-string regex callback).

    Args:
        doc: the (invalid) JSON text, bytes-like, starting outside a string (a document, a ``[``
            chunk of events, or a header).
        base: document offset of ``doc[0]``, added to the reported offset.

    Returns:
        ``(repaired, counts, first_offset)``: ``counts`` maps each flag of :data:`REPAIR_FLAGS`
        with at least one repair to its number of repairs (non-finite tokens; control characters);
        ``first_offset`` is the document byte offset of the first repair (None when nothing changed).
    """
    text = bytes(doc)
    b = np.frombuffer(text, np.uint8)
    q = _quotes(b)
    sites: list[tuple[int, int, bytes]] = []  # (start, end, replacement)
    ctrl = np.flatnonzero(b < 0x20)
    if ctrl.size:
        inside = (np.searchsorted(q, ctrl) & 1) == 1  # an odd number of quotes before: inside a string
        for i in ctrl[inside].tolist():
            sites.append((i, i + 1, b"\\u%04x" % text[i]))
    n_ctrl = len(sites)
    for m in _NONFINITE.finditer(text):
        if not (int(np.searchsorted(q, m.start())) & 1):  # outside strings only
            sites.append((m.start(), m.end(), b"null"))
    counts = {k: v for k, v in (("nonfinite_number", len(sites) - n_ctrl), ("control_characters", n_ctrl)) if v}
    if not sites:
        return text, counts, None
    sites.sort()
    out, pos = [], 0
    for a, e, rep in sites:
        out += (text[pos:a], rep)
        pos = e
    out.append(text[pos:])
    return b"".join(out), counts, base + sites[0][0]


def repair_json(doc: bytes) -> tuple[bytes, list[str]]:
    """Return ``(repaired_document, flags)``; ``flags`` (sorted) is empty when nothing was changed.

    Non-finite tokens become ``null`` (flag ``nonfinite_number``); raw control characters inside
    strings become ``\\u00XX`` escapes (flag ``control_characters``).
    """
    out, counts, _ = repair_text(doc)
    return out, sorted(counts)


_SUSPECT = re.compile(rb"[\x00-\x1f]|(?<![A-Za-z0-9_.])-?(?:" + "|".join(NONFINITE_TOKENS).encode() + rb")(?![A-Za-z0-9_])")


def worth_repairing(text, exc: Exception) -> bool:
    """Whether a msgspec ``DecodeError`` on ``text`` may be one :func:`repair_text` fixes: an "invalid
    character" error with a control character or a non-finite token at or shortly before the byte it
    names (msgspec names the byte where it gave up, up to a few bytes after the token). Cheap; avoids
    repairing text that failed for another reason, e.g. a chunk cut inside a string (truncated)."""
    m = _MALFORMED_AT.search(str(exc))
    if not m:
        return False
    i = int(m.group(1))
    return _SUSPECT.search(bytes(text[max(0, i - 64):i + 16])) is not None
