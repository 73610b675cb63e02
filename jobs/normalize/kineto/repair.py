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

Four defects next to a value are repaired too, each up to the next structural character and only outside
strings (the exporter bugs in ``../shared/reference/bug_cases.md`` and the issues cited):

* a comma before a closing ``]`` or ``}`` (a hand-written exporter's trailing comma; pytorch #126703): removed
  (flag ``trailing_comma``);
* a key without a value, ``"Process Group Description": ,`` (pytorch PR #172353, kineto PR #1213): ``null``
  (flag ``missing_value``);
* a bare word as a value, ``"…": N/A`` (kineto PR #129, tb_plugin #131): quoted as a string (flag ``bare_word``);
  ``true``/``false``/``null`` and the non-finite tokens are not bare words;
* a locale decimal comma, ``"blocks per SM": 0,015152, "warps per SM": 31,030304`` (Kineto writing doubles under
  a comma-decimal ``LC_NUMERIC``; pytorch #191032): a member value ``:`` + optional ``-`` + digits, then ``,``
  directly followed by digits (and an optional exponent) up to the next ``,`` ``}`` or ``]``, has its ``,`` read
  as the decimal point (flag ``decimal_comma``, the offset of the comma). Unambiguous: in an object a key must
  follow a member's ``,``, and a key is a string, never a digit. The integer part must be digits only (a number
  with a ``.`` or an exponent before the comma is left alone), and numbers in arrays (``[0,5]``, valid JSON) are
  never touched.

An unescaped double quote inside a string value (kineto PR #1459 / #1508, pytorch #113001, HTA PR #324: Python
frame names such as ``"{"device": "cpu", "dtype": "float32"}(12): run"``, thread names such as
``"custom_call_target="tpu_custom_call""``) is repaired where one reading is left (flag ``unescaped_quote``, count:
string values, offset: the first quote escaped in each):

1. The string closed early is found from the quote pairing (outside strings every closing quote is followed, past
   whitespace, by ``:`` ``,`` ``]`` or ``}``, every opening quote preceded by ``:`` ``,`` ``[`` or ``{``): the first
   quote that breaks this belongs to a string value (its opening quote follows a ``:``) that ended too early.
   Not when the quote that ended it is followed by whitespace and another quote (``"a" "b"``: a missing comma).
2. Its object decides the rule: an event (an element of an array: the traceEvents array) or the ``args`` object of
   an event; any other place is not repaired.
3. Candidates for the true closing quote are the quotes after the opening one, up to the end of its line (Kineto
   writes a value and the keys after it on one line) or 64 KiB: a quote followed by ``\\s*,\\s*"key"\\s*:`` or by
   ``\\s*}``. A candidate is *consistent* when, with every quote between the opening quote and it escaped, the
   object it is in closes well-formed (the other repairs of this module applied) and is followed by ``,`` ``]``
   (an event) or ``,`` ``}`` (args). So an object holding a second such string after this one (a name and an
   args value both broken) has no consistent candidate and is not repaired.
4. The first consistent candidate is the closing quote when its key is one of the event keys ``ph cat name pid
   tid ts dur id bp args s`` or the ``}`` that ends the event (any key inside ``args``); every quote before it is
   escaped. When the first consistent candidate resumes an event with another key (the name could end there or
   later: ``"x", "y": "z"`` inside a name), or none is consistent, nothing is repaired: the file is quarantined
   with the byte offset of the decode error, as before.
5. The pairing goes on after the closing quote, to the next break; the first break that is not repaired ends the
   search (the text after it is left as it is). This repair runs before the others, which then see the strings
   right; a repaired string keeps every character, its quotes included.

Other damage outside strings, or a string that never ends, is structure: not repaired, the file is quarantined
with the byte offset of the error. Every repair keeps every event; the repairs outside numbers and strings keep
their document offsets too (``repair_offsets``).

The first two repairs are applied outside/inside string literals only; everything else is left byte for
byte. The native scanner (``_kineto_scan.c``) applies the same two repairs while it scans, with the same
counts and offsets; it hands a file with any other damage to the pure-Python path, which repairs it. A document
cut short is not repaired here: :func:`jobs.normalize.kineto.parse.parse_kineto` keeps its complete events (flag
``truncated_tail``).
"""

from __future__ import annotations

import bisect
import re

import msgspec
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
#: Flag names of the repairs (:func:`repair_text`'s, then the salvage of a truncated document).
REPAIR_FLAGS = (
    "nonfinite_number",
    "control_characters",
    "invalid_utf8",
    "invalid_escape",
    "lone_surrogate",
    "trailing_comma",
    "missing_value",
    "bare_word",
    "decimal_comma",
    "unescaped_quote",
    "truncated_tail",
)
#: The repairs inside strings whose document offsets are kept (:func:`repair_text`, at most :data:`MAX_OFFSETS`).
STRING_REPAIRS = ("invalid_utf8", "invalid_escape", "lone_surrogate", "unescaped_quote")
#: The repairs next to a value (outside strings), offsets kept too; ``truncated_tail`` is the salvage of a cut
#: document (:func:`jobs.normalize.kineto.parse.parse_kineto`), not a repair of :func:`repair_text`.
STRUCTURE_REPAIRS = ("trailing_comma", "missing_value", "bare_word", "decimal_comma", "truncated_tail")
MAX_OFFSETS = 10
_REPLACEMENT = "\ufffd".encode()
_NON_ASCII = re.compile(rb"[\x80-\xff]+")
# an escape: the valid ones (group 1 a one-letter escape, group 2 the hex of \uXXXX) or an invalid one (neither)
_ESCAPE = re.compile(rb'\\(?:(["\\/bfnrt])|u([0-9a-fA-F]{4})|)')
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# A bare non-finite token (whether it is outside strings is decided from the quotes).
_NONFINITE = re.compile(rb"(?<![A-Za-z0-9_.])-?(?:" + "|".join(NONFINITE_TOKENS).encode() + rb")(?![A-Za-z0-9_])")
_MALFORMED_AT = re.compile(r"invalid character \(byte (\d+)\)")
_ERROR_AT = re.compile(r"\(byte (\d+)\)")
# Structure next to a value (outside strings; checked from the quotes): a comma before a closing bracket, a key
# without a value, a bare word as a value (its end: the next comma or closing bracket).
_TRAILING_COMMA = re.compile(rb",(?=\s*[\]}])")
_MISSING_VALUE = re.compile(rb":(?=\s*[,}])")
_BARE_WORD = re.compile(rb"(?<=:)(\s*)([A-Za-z_][A-Za-z0-9_./+\-]*)(?=\s*[,}\]])")
_JSON_WORDS = frozenset({b"true", b"false", b"null", *(t.encode() for t in NONFINITE_TOKENS)})
# a member value with a decimal comma (group 2: the comma; pytorch #191032)
_DECIMAL_COMMA = re.compile(rb":\s*-?[0-9]+(,)[0-9]+(?:[eE][-+]?[0-9]+)?(?=\s*[,}\]])")
# Unescaped quotes (module docstring): what may follow the true closing quote of a string value.
_RESUME_ANY = re.compile(rb'\s*(?:,\s*"[^"\\\n]*"\s*:|\})')
_RESUME_EVENT = re.compile(rb'\s*(?:,\s*"(?:ph|cat|name|pid|tid|ts|dur|id|bp|args|s)"\s*:|\})')
_ARGS_KEY_BEFORE = re.compile(rb'"args"\s*:\s*$')
_BRACKETS = re.compile(rb"[{}\[\]]")
_TRAILING_AT = re.compile(r"trailing characters \(byte (\d+)\)")
_QUOTE_SPAN = 1 << 16  # how far a string value is searched for its closing quote, and its object for its start
_OPEN_OK = np.frombuffer(b":,[{", np.uint8)
_WS_BYTES = np.frombuffer(b" \t\r\n", np.uint8)
_CLOSE_OK = np.frombuffer(b":,]}", np.uint8)
_ANY = msgspec.json.Decoder()


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
    if b"," in text:
        sites["decimal_comma"] = [
            (m.start(1), m.end(1), b".") for m in _DECIMAL_COMMA.finditer(text) if outside(m.start())
        ]
    return {k: v for k, v in sites.items() if v}


def _enclosing(text: bytes, q: np.ndarray, escaped: list, pos: int) -> int | None:
    """Position of the innermost ``{`` or ``[`` still open at ``pos`` (outside strings, searched back at most
    :data:`_QUOTE_SPAN` bytes), or None. ``escaped``: sorted quotes of ``q`` that are string content."""
    depth = 0
    for m in reversed(list(_BRACKETS.finditer(text, max(0, pos - _QUOTE_SPAN), pos))):
        p = m.start()
        if (int(np.searchsorted(q, p)) - bisect.bisect_left(escaped, p)) & 1:
            continue  # inside a string
        if text[p] in b"}]":
            depth += 1
        elif depth:
            depth -= 1
        else:
            return p
    return None


def _consistent(text: bytes, q: np.ndarray, o_idx: int, m: int, start: int, in_args: bool, escaped: list) -> bool:
    """Whether ``q[m]`` can close the string opened at ``q[o_idx]``: with the quotes between them escaped (and
    those of a string repaired before in the same object), the object opened at ``start`` closes well-formed
    (after the other repairs) and is followed by ``,`` or ``]`` (an event) or ``,`` or ``}`` (args)."""
    before = escaped[bisect.bisect_left(escaped, start) : bisect.bisect_left(escaped, int(q[o_idx]))]
    parts: list[bytes] = []
    pos = start
    for x in before + q[o_idx + 1 : m].tolist():
        parts += [text[pos:x], b"\\"]
        pos = x
    parts.append(text[pos : int(q[m]) + _QUOTE_SPAN])
    obj = b"".join(parts)
    obj = _apply(obj, _sites(obj, np.frombuffer(obj, np.uint8))[0])
    try:
        _ANY.decode(obj)
        return False  # ends exactly at the searched span: undecided
    except msgspec.DecodeError as exc:
        t = _TRAILING_AT.search(str(exc))
        if t is None:
            return False
    after = obj[int(t.group(1)) - 1 : int(t.group(1))]  # msgspec names the byte after the first trailing one
    return after in ((b",", b"}") if in_args else (b",", b"]"))


def _close_string(text: bytes, q: np.ndarray, o_idx: int, escaped: list) -> int | None:
    """Index in ``q`` of the true closing quote of the string value opened at ``q[o_idx]`` that closed early
    (module docstring, unescaped quotes, steps 2-4), or None when not decided."""
    o = int(q[o_idx])
    start = _enclosing(text, q, escaped, o)
    if start is None or text[start] != 0x7B:
        return None
    before = text[max(0, start - 64) : start].rstrip()
    if before[-1:] in (b"[", b","):
        in_args = False  # an element of the event array
    elif _ARGS_KEY_BEFORE.search(text, max(0, start - 64), start):
        in_args = True
    else:
        return None
    nl = text.find(b"\n", o)
    bound = min(nl if nl >= 0 else len(text), o + _QUOTE_SPAN)
    for m in range(o_idx + 2, int(np.searchsorted(q, bound))):  # q[o_idx + 1] closed it early
        cq = int(q[m])
        if _RESUME_ANY.match(text, cq + 1) is None or not _consistent(text, q, o_idx, m, start, in_args, escaped):
            continue
        if in_args or _RESUME_EVENT.match(text, cq + 1) is not None:
            return m
        return None  # an unknown key resumes the event here: the value could end here or later
    return None


def _beside(b: np.ndarray, q: np.ndarray, step: int, edge: int) -> np.ndarray:
    """The first byte that is not whitespace before (``step`` -1) or after (+1) each position ``q`` of ``b``;
    ``edge`` past the start / end of ``b``. Only arrays the size of ``q`` (memory: a repair runs per chunk)."""
    out = np.full(q.size, edge, np.uint8)
    pos, todo = q + step, np.arange(q.size)
    while todo.size:
        ok = (pos >= 0) & (pos < b.size)
        todo, pos = todo[ok], pos[ok]
        ch = b[pos]
        ws = np.isin(ch, _WS_BYTES)
        out[todo[~ws]] = ch[~ws]
        todo, pos = todo[ws], pos[ws] + step
    return out


def _unescaped_quote_sites(text: bytes, b: np.ndarray, q: np.ndarray) -> list[list[int]]:
    """The quotes to escape, one list per repaired string value (module docstring, unescaped quotes)."""
    if q.size < 3:
        return []
    prev, nxt = _beside(b, q, -1, ord("[")), _beside(b, q, 1, ord(","))
    bad_open, bad_close = ~np.isin(prev, _OPEN_OK), ~np.isin(nxt, _CLOSE_OK)
    even = (np.arange(q.size) & 1) == 0
    # the quotes breaking the pairing when strings start at an even / odd index of q
    breaks = (np.flatnonzero(np.where(even, bad_open, bad_close)), np.flatnonzero(np.where(even, bad_close, bad_open)))
    out: list[list[int]] = []
    escaped: list[int] = []
    j = 0  # q[j] opens a string
    while True:
        v_arr = breaks[j & 1]
        i = int(np.searchsorted(v_arr, j))
        if i == v_arr.size:
            break
        v = int(v_arr[i])
        o_idx = v - 2 if (v - j) % 2 == 0 else v - 1  # the string before a misplaced opening quote, or this one
        if o_idx < j or prev[o_idx] != ord(":"):
            break
        early = int(q[o_idx + 1])
        if nxt[o_idx + 1] == 0x22 and b[early + 1] != 0x22:
            break  # "a" "b": two strings apart, a missing comma rather than a quote inside one string
        m = _close_string(text, q, o_idx, escaped)
        if m is None:
            break
        inner = q[o_idx + 1 : m].tolist()
        out.append(inner)
        escaped += inner
        j = m + 1
    return out


def _sites(text: bytes, b: np.ndarray, q: np.ndarray | None = None) -> tuple[list[tuple[int, int, bytes]], dict]:
    """Every repair site of ``text`` but the unescaped quotes: ``(sites, {flag: its sites})``; ``nonfinite_number``
    and ``control_characters`` have their sites in the list only (their offsets are not kept). ``q``: the
    string quotes of ``b`` (:func:`_quotes`) when known."""
    if q is None:
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
    by_flag: dict[str, list] = {
        k: [None] * v for k, v in (("nonfinite_number", len(sites) - n_ctrl), ("control_characters", n_ctrl)) if v
    }
    for flag, found in {**_string_sites(text, q), **_structure_sites(text, q)}.items():
        by_flag[flag] = found
        sites += found
    return sites, by_flag


def _apply(text: bytes, sites: list[tuple[int, int, bytes]]) -> bytes:
    """``text`` with each ``(start, end, replacement)`` site replaced."""
    if not sites:
        return text
    out: list[bytes] = []
    pos = 0
    for a, e, rep in sorted(sites):
        out += (text[pos:a], rep)
        pos = e
    out.append(text[pos:])
    return b"".join(out)


def repair_text(doc, base: int = 0, offsets: dict | None = None) -> tuple[bytes, dict[str, int], int | None]:
    """Repair non-finite tokens, raw control characters, the damage inside strings and next to values
    (module docstring).

    Vectorized: string literals are located from the unescaped quotes (numpy), control bytes inside
    them and non-finite tokens outside them are the repair sites; only the sites are visited in
    Python (a few MB/s would otherwise be spent in a per-string regex callback). Unescaped quotes are
    repaired first (kineto PR #1459, pytorch #113001), so that the other repairs see the strings right.

    Args:
        doc: the (invalid) JSON text, bytes-like, starting outside a string (a document, a ``[``
            chunk of events, or a header).
        base: document offset of ``doc[0]``, added to the reported offset.
        offsets: when given, ``{flag: [document offsets]}`` of the repairs inside strings and next to values
            (:data:`STRING_REPAIRS`, :data:`STRUCTURE_REPAIRS`) is extended in place, at most :data:`MAX_OFFSETS`
            per flag.

    Returns:
        ``(repaired, counts, first_offset)``: ``counts`` maps each flag of :data:`REPAIR_FLAGS`
        with at least one repair to its number of repairs (tokens, characters, string values...);
        ``first_offset`` is the document byte offset of the first repair (None when nothing changed).
    """
    text = bytes(doc)
    b = np.frombuffer(text, np.uint8)
    q = _quotes(b)
    quoted = _unescaped_quote_sites(text, b, q)
    flat = [x for inner in quoted for x in inner]
    if flat:  # one backslash before each quote; the sites below are found in the escaped text
        text = _apply(text, [(x, x, b"\\") for x in flat])
        inserted = np.asarray(flat, np.int64) + np.arange(len(flat))  # where the backslashes are now

        def orig(i: int) -> int:
            return i - int(np.searchsorted(inserted, i))

    else:

        def orig(i: int) -> int:
            return i

    sites, by_flag = _sites(text, np.frombuffer(text, np.uint8)) if flat else _sites(text, b, q)
    counts = {k: len(v) for k, v in by_flag.items()}
    where = {k: [orig(a) for a, _, _ in v] for k, v in by_flag.items() if k in STRING_REPAIRS + STRUCTURE_REPAIRS}
    if quoted:
        counts["unescaped_quote"] = len(quoted)
        where["unescaped_quote"] = [inner[0] for inner in quoted]
    if offsets is not None:
        for flag, found in where.items():
            kept = offsets.setdefault(flag, [])
            kept += [base + a for a in found[: MAX_OFFSETS - len(kept)]]
    firsts = ([orig(min(a for a, _, _ in sites))] if sites else []) + flat[:1]
    if not firsts:
        return text, counts, None
    return _apply(text, sites), counts, base + min(firsts)


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
    + rb")(?![A-Za-z0-9_])|,\s*[\]}]|:\s*[,}]|:\s*[A-Za-z_]|:\s*-?[0-9]+,[0-9]"
)
# msgspec's messages where a string value closed early (an unescaped quote) stops the decode
_EARLY_CLOSE = ("expected ',' or '}'", "object keys must be strings", "expected ':'")
_QUOTE_BEFORE = re.compile(rb'"\s*(?:,\s*[^"\s]*)?$')
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
    names (msgspec names the byte where it gave up, up to a few bytes after the token), an error at a bare
    word, a missing value, a trailing comma or a decimal comma nearby, an error right after a string (an
    unescaped quote closed it early), or one of msgspec's errors for damage inside strings (invalid UTF-8, an
    invalid escape, a lone surrogate). Cheap; avoids repairing text that failed for another reason, e.g. a
    chunk cut inside a string (truncated)."""
    msg = str(exc)
    if any(k in msg for k in _STRING_DAMAGE):
        return True
    if "truncated" in msg and _SURROGATE_ESCAPE.search(bytes(text)) is not None:
        return True  # a high surrogate escape at the end of a string reads as truncated input
    m = _MALFORMED_AT.search(msg) or _ERROR_AT.search(msg)
    if not m:
        return False
    i = int(m.group(1))
    if any(k in msg for k in _EARLY_CLOSE) and _QUOTE_BEFORE.search(bytes(text[max(0, i - 64) : i])):
        return True  # the decode stopped right after a string (or a string and a comma): an unescaped quote
    return _SUSPECT.search(bytes(text[max(0, i - 64) : i + 16])) is not None
