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

Exporters also damage the text *inside* string literals (a kernel name cut mid-character, a Windows path
written without escaping its backslashes; HTA PR #324). What can be repaired lexically, without guessing
structure, is:

* invalid UTF-8 bytes inside a string: each maximal invalid sequence becomes U+FFFD, the replacement
  character, as Python's ``errors="replace"`` decodes it (flag ``invalid_utf8``);
* an invalid escape (``\\q``, ``\\x41``, a ``\\u`` without 4 hex digits): the backslash is read as a
  literal backslash (flag ``invalid_escape``);
* a lone UTF-16 surrogate escape (``\\ud800`` not followed by a low surrogate, or a lone ``\\udc00``):
  U+FFFD (flag ``lone_surrogate``).

Three defects next to a value are repaired too, each up to the next structural character and only outside
strings (the exporter bugs in ``../shared/reference/bug_cases.md`` and the issues cited):

* a comma before a closing ``]`` or ``}`` (a hand-written exporter's trailing comma; pytorch #126703): removed
  (flag ``trailing_comma``);
* a key without a value, ``"Process Group Description": ,`` (pytorch PR #172353, kineto PR #1213): ``null``
  (flag ``missing_value``);
* a bare word as a value, ``"…": N/A`` (kineto PR #129, tb_plugin #131): quoted as a string (flag ``bare_word``);
  ``true``/``false``/``null`` and the non-finite tokens are not bare words.

Other damage outside strings, or a string that never ends, is structure: not repaired, the file is quarantined
with the byte offset of the error. Every repair keeps every event; the repairs outside numbers and strings keep
their document offsets too (``repair_offsets``).

The first two repairs are applied outside/inside string literals only; everything else is left byte for
byte. The native scanner (``_kineto_scan.c``) applies the same two repairs while it scans, with the same
counts and offsets; it hands a file with string damage to the pure-Python path, which repairs it.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = [
    "repair_json",
    "repair_text",
    "worth_repairing",
    "NONFINITE_TOKENS",
    "REPAIR_FLAGS",
    "STRING_REPAIRS",
    "STRUCTURE_REPAIRS",
]

#: Spellings of non-finite numbers repaired to ``null`` (each may carry a leading ``-``).
NONFINITE_TOKENS = ("NaN", "nan", "NAN", "Infinity", "infinity", "INFINITY", "inf", "Inf", "INF")
#: Flag names of the repairs, in the order of :func:`repair_text`'s counts.
REPAIR_FLAGS = (
    "nonfinite_number",
    "control_characters",
    "invalid_utf8",
    "invalid_escape",
    "lone_surrogate",
    "trailing_comma",
    "missing_value",
    "bare_word",
)
#: The repairs inside strings whose document offsets are kept (:func:`repair_text`, at most :data:`MAX_OFFSETS`).
STRING_REPAIRS = ("invalid_utf8", "invalid_escape", "lone_surrogate")
#: The repairs next to a value (outside strings), offsets kept too.
STRUCTURE_REPAIRS = ("trailing_comma", "missing_value", "bare_word")
MAX_OFFSETS = 10
_REPLACEMENT = "\ufffd".encode()
_NON_ASCII = re.compile(rb"[\x80-\xff]+")
# an escape: the valid ones (group 1 a one-letter escape, group 2 the hex of \uXXXX) or an invalid one (neither)
_ESCAPE = re.compile(rb'\\(?:(["\\/bfnrt])|u([0-9a-fA-F]{4})|)')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# A bare non-finite token (whether it is outside strings is decided from the quotes).
_NONFINITE = re.compile(rb"(?<![A-Za-z0-9_.])-?(?:" + "|".join(NONFINITE_TOKENS).encode() + rb")(?![A-Za-z0-9_])")
_MALFORMED_AT = re.compile(r"invalid character \(byte (\d+)\)")
# Structure next to a value (outside strings; checked from the quotes): a comma before a closing bracket, a key
# without a value, a bare word as a value (its end: the next comma or closing bracket).
_TRAILING_COMMA = re.compile(rb",(?=\s*[\]}])")
_MISSING_VALUE = re.compile(rb":(?=\s*[,}])")
_BARE_WORD = re.compile(rb"(?<=:)(\s*)([A-Za-z_][A-Za-z0-9_./+\-]*)(?=\s*[,}\]])")
_JSON_WORDS = frozenset({b"true", b"false", b"null", *(t.encode() for t in NONFINITE_TOKENS)})


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


def _string_sites(text: bytes, q: np.ndarray) -> dict[str, list[tuple[int, int, bytes]]]:
    """Repair sites of the damage inside strings (module docstring): ``{flag: [(start, end, replacement)]}``."""
    sites: dict[str, list] = {k: [] for k in STRING_REPAIRS}

    def inside(i: int) -> bool:
        return bool(int(np.searchsorted(q, i, side="right")) & 1)

    for m in _NON_ASCII.finditer(text):
        run = m.group()
        try:
            run.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        if not inside(m.start()):
            continue  # outside strings: structure, not repaired
        pos = 0
        while pos < len(run):
            try:
                run[pos:].decode("utf-8")
                break
            except UnicodeDecodeError as exc:
                a, e = pos + exc.start, pos + exc.end
                sites["invalid_utf8"].append((m.start() + a, m.start() + e, _REPLACEMENT))
                pos = e
    if b"\\" in text:
        for m in _ESCAPE.finditer(text):
            if not inside(m.start()):
                continue
            if m.group(1) is None and m.group(2) is None:
                sites["invalid_escape"].append((m.start(), m.start() + 1, b"\\\\"))
            elif m.group(2) is not None:
                v = int(m.group(2), 16)
                if 0xD800 <= v <= 0xDBFF:
                    nxt = _SURROGATE_ESCAPE.match(text, m.end())
                    if nxt is None or int(nxt.group()[2:], 16) < 0xDC00:
                        sites["lone_surrogate"].append((m.start(), m.end(), b"\\ufffd"))
                elif 0xDC00 <= v <= 0xDFFF:
                    prev = _SURROGATE_ESCAPE.match(text, m.start() - 6) if m.start() >= 6 else None
                    if prev is None or int(prev.group()[2:], 16) >= 0xDC00:
                        sites["lone_surrogate"].append((m.start(), m.end(), b"\\ufffd"))
    return {k: v for k, v in sites.items() if v}


def _structure_sites(text: bytes, q: np.ndarray) -> dict[str, list[tuple[int, int, bytes]]]:
    """Repair sites of the defects next to a value (module docstring), outside strings only."""

    def outside(i: int) -> bool:
        return not (int(np.searchsorted(q, i, side="right")) & 1)

    sites: dict[str, list] = {k: [] for k in STRUCTURE_REPAIRS}
    if b"," in text:
        sites["trailing_comma"] = [
            (m.start(), m.end(), b"") for m in _TRAILING_COMMA.finditer(text) if outside(m.start())
        ]
    sites["missing_value"] = [(m.end(), m.end(), b" null") for m in _MISSING_VALUE.finditer(text) if outside(m.start())]
    sites["bare_word"] = [
        (m.start(2), m.end(2), b'"' + m.group(2) + b'"')
        for m in _BARE_WORD.finditer(text)
        if m.group(2) not in _JSON_WORDS and m.group(2).lstrip(b"-") not in _JSON_WORDS and outside(m.start(2))
    ]
    return {k: v for k, v in sites.items() if v}


def repair_text(doc, base: int = 0, offsets: dict | None = None) -> tuple[bytes, dict[str, int], int | None]:
    """Repair non-finite tokens, raw control characters and the damage inside strings (module docstring).

    Vectorized: string literals are located from the unescaped quotes (numpy), control bytes inside
    them and non-finite tokens outside them are the repair sites; only the sites are visited in
    Python (a few MB/s would otherwise be spent in a per-string regex callback).

    Args:
        doc: the (invalid) JSON text, bytes-like, starting outside a string (a document, a ``[``
            chunk of events, or a header).
        base: document offset of ``doc[0]``, added to the reported offset.
        offsets: when given, ``{flag: [document offsets]}`` of the repairs inside strings
            (:data:`STRING_REPAIRS`) is extended in place, at most :data:`MAX_OFFSETS` per flag.

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
    for flag, found in {**_string_sites(text, q), **_structure_sites(text, q)}.items():
        counts[flag] = len(found)
        sites += found
        if offsets is not None:
            kept = offsets.setdefault(flag, [])
            kept += [base + a for a, _, _ in found[: MAX_OFFSETS - len(kept)]]
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


_SUSPECT = re.compile(
    rb"[\x00-\x1f]|(?<![A-Za-z0-9_.])-?(?:"
    + "|".join(NONFINITE_TOKENS).encode()
    + rb")(?![A-Za-z0-9_])|,\s*[\]}]|:\s*[,}]|:\s*[A-Za-z_]"
)
#: msgspec's messages for the damage inside strings (they carry no byte offset, or one past the escape).
_STRING_DAMAGE = (
    "Invalid UTF-8",
    "invalid escape character",
    "invalid character in unicode escape",
    "invalid utf-16 surrogate pair",
)


def worth_repairing(text, exc: Exception) -> bool:
    """Whether a msgspec ``DecodeError`` on ``text`` may be one :func:`repair_text` fixes: an "invalid
    character" error with a control character or a non-finite token at or shortly before the byte it
    names (msgspec names the byte where it gave up, up to a few bytes after the token), or one of msgspec's
    errors for damage inside strings (invalid UTF-8, an invalid escape, a lone surrogate). Cheap; avoids
    repairing text that failed for another reason, e.g. a chunk cut inside a string (truncated)."""
    msg = str(exc)
    if any(k in msg for k in _STRING_DAMAGE):
        return True
    if "truncated" in msg and _SURROGATE_ESCAPE.search(bytes(text)) is not None:
        return True  # a high surrogate escape at the end of a string reads as truncated input
    m = _MALFORMED_AT.search(msg)
    if not m:
        return False
    i = int(m.group(1))
    return _SUSPECT.search(bytes(text[max(0, i - 64) : i + 16])) is not None
