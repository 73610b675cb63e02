"""Duplicate keys in trace events (D15): detected and flagged, the last value kept.

A JSON object may repeat a key; RFC 8259 leaves the meaning open and every parser we use (msgspec, Python's
``json``, the C scanner) keeps the last value silently. Chrome's own tracing wrote ``"args": {"x": 1, …, "x": 2}``
(catapult-project/catapult #4343); Kineto pastes raw ``metadataJson()`` text and collective fields next to its
own args (``libkineto/src/output_json.cpp``), so a repeated key is possible there too. Which value was meant is
unknown, so the event is kept with the last value (as before) and the file is flagged ``duplicate_key``
(count: repeated keys; offsets: the document offset of each repeated key's opening quote, the first
:data:`~jobs.normalize.kineto.repair.MAX_OFFSETS`).

Keys checked: the event's own fields that become columns, :data:`EVENT_KEYS`, and inside an event's ``args``
object the keys that become integer columns, :data:`ARGS_KEYS` (a key is compared after unescaping). Other keys
(e.g. ``Collective name``, an args ``name``) are not checked. The C scanner (``_kineto_scan.c``) counts the same
keys while it scans; this module is the pure-Python path's detection, which spares a valid file without
duplicates any per-event loop in Python:

1. a chunk of events is *clean* when no ``\\u00`` escape (the only way to spell a letter of these keys
   differently) and no whitespace (or other byte up to 0x20) before a ``:`` occur in its text, and for every
   checked key the number of literal ``"key":`` in the text equals the number of events (objects, for the
   args keys) where the decoded key is present and not null. A repeated key adds a literal without adding a
   present key, so a clean chunk has no duplicate;
2. any other chunk is checked event by event (:func:`_event_duplicates`, a small tokenizer), only the events
   whose text repeats a checked key's literal or holds an escape.

Cost on the pure-Python path: about 0.2 s per 55 MB of valid JSON (numpy over the key positions, one decode of
the args keys); the C scanner's count costs nothing measurable. The offsets are those of the text decoded: after a
lenient repair earlier in the same chunk that changed the length of the text, they are off by that change.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import numpy as np

from jobs.normalize.kineto.columns import pluck
from jobs.normalize.kineto.repair import MAX_OFFSETS

__all__ = ["ARGS_KEYS", "EVENT_KEYS", "find_duplicate_keys"]

#: An event's own keys checked for duplicates (the fields of :class:`~jobs.normalize.kineto.shapes.Event`).
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args")
#: The keys of an event's ``args`` object checked for duplicates (the integer columns).
ARGS_KEYS = ("correlation", "External id", "external id", "stream", "device")


class _ArgKeys(msgspec.Struct, gc=False):
    """The checked args keys, and ``name`` (an M event's args ``name`` is a literal ``"name":`` too)."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    stream: Any = None
    device: Any = None
    name: Any = None


class _RawHeader(msgspec.Struct, gc=False):
    traceEvents: list[msgspec.Raw] | None = None


_ARG_FIELDS = {
    "correlation": "correlation",
    "External id": "external_id",
    "external id": "external_id_legacy",
    "stream": "stream",
    "device": "device",
}
_ARG_KEYS_LIST = msgspec.json.Decoder(list[_ArgKeys])
_RAW_EVENTS = msgspec.json.Decoder(list[msgspec.Raw])
_RAW_DOCUMENT = msgspec.json.Decoder(_RawHeader | list[msgspec.Raw])
_EVENT_SET = frozenset(k.encode() for k in EVENT_KEYS)
_ARGS_SET = frozenset(k.encode() for k in ARGS_KEYS)
_LITERALS = tuple(b'"' + k.encode() + b'"' for k in EVENT_KEYS + ARGS_KEYS)
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_COLON_AFTER = re.compile(rb"\s*:")


def _right_aligned(part: bytes) -> tuple[int, int]:
    """``(mask, value)`` matching ``part`` (at most 8 bytes) at the end of 8 bytes read as a little-endian uint64."""
    return ((1 << (8 * len(part))) - 1) << (8 * (8 - len(part))), int.from_bytes(bytes(8 - len(part)) + part, "little")


def _key_codes(keys) -> list[tuple[int, int, tuple[int, int] | None]]:
    """``(mask, value, head)`` per key: the last 8 bytes of ``"`` + the key, up to its closing quote
    (:func:`_right_aligned`); ``head``: the same for the 8 bytes before those (keys of 8 bytes and more, at most 15)."""
    out = []
    for k in keys:
        lit = b'"' + k.encode()  # at most 16 bytes: the longest key is "External id"
        out.append((*_right_aligned(lit[-8:]), _right_aligned(lit[:-8]) if len(lit) > 8 else None))
    return out


_CODES = _key_codes(EVENT_KEYS + ARGS_KEYS)


def _literal_counts(text) -> list[int] | None:
    """Occurrences of ``"key":`` per key of ``EVENT_KEYS + ARGS_KEYS`` in ``text``; None when a ``:`` follows
    whitespace (a key written ``"key" :``)."""
    b = np.frombuffer(text, np.uint8)
    colon = np.flatnonzero(b == 0x3A)
    colon = colon[colon >= 1]
    before = b[colon - 1]
    if (before <= 0x20).any():  # whitespace (or a control byte) before a ":"
        return None
    end = colon[before == 0x22] - 1  # the closing quote of each key
    first = end[end < 16].tolist()  # keys at the very start: compared in Python
    end = end[end >= 16]
    u8 = np.ndarray((len(b) - 7,), "<u8", b, 0, (1,))  # the 8 bytes from each position
    words = u8[end - 8]  # the 8 bytes before each key's closing quote
    counts = [sum(e + 1 >= len(lit) and text[e + 1 - len(lit) : e + 1] == lit for e in first) for lit in _LITERALS]
    masked: dict = {}
    for i, (mask, value, head) in enumerate(_CODES):
        if mask not in masked:
            masked[mask] = words & np.uint64(mask)
        same = masked[mask] == np.uint64(value)
        if head:  # a long key: the 8 bytes before those too (``head`` right-aligned: mask, value)
            at = end[same]
            at = at[at >= 16]
            counts[i] += int(np.count_nonzero((u8[end[same] - 16] & np.uint64(head[0])) == np.uint64(head[1])))
        else:
            counts[i] += int(np.count_nonzero(same))
    return counts


def _u00(text: bytes) -> bool:
    """Whether ``text`` holds ``\\u00`` (an escape that could spell a key's letter)."""
    if b"\\" not in text:  # memchr: most chunks
        return False
    b = np.frombuffer(text, np.uint8)
    bs = np.flatnonzero(b[:-3] == 0x5C)
    return bool(((b[bs + 1] == 0x75) & (b[bs + 2] == 0x30) & (b[bs + 3] == 0x30)).any())


def _present_counts(events: list) -> list[int] | None:
    """Events with each of :data:`EVENT_KEYS` present and not null, then args objects with each of
    :data:`ARGS_KEYS`; the args ``name`` count is added to the event ``name`` count. None when an args value
    is not an object."""
    counts = [len(events) - pluck(events, k).count(None) for k in EVENT_KEYS]
    raw_args = [a for a in pluck(events, "args") if a is not None]
    if not raw_args:
        return counts + [0] * len(ARGS_KEYS)
    try:
        A = _ARG_KEYS_LIST.decode(b"[" + b",".join(raw_args) + b"]")
    except msgspec.ValidationError:  # an args value that is not an object
        return None
    counts[EVENT_KEYS.index("name")] += len(A) - pluck(A, "name").count(None)
    return counts + [len(A) - pluck(A, _ARG_FIELDS[k]).count(None) for k in ARGS_KEYS]


def _event_duplicates(ev: bytes) -> list[int]:
    """Offsets in ``ev`` (one event object's text) of the opening quote of each repeated checked key."""
    out: list[int] = []
    depth = 0
    seen: set = set()
    seen_args: set = set()
    args_next = in_args = False  # the event's "args" key was just read / inside its args object
    for m in _TOKEN.finditer(ev):
        tok = m.group()
        if tok[0] == 0x22:
            if _COLON_AFTER.match(ev, m.end()) is None:
                continue  # a string value
            key = tok[1:-1] if b"\\" not in tok else json.loads(tok).encode("utf-8", "surrogatepass")
            if depth == 1:
                if key in _EVENT_SET:
                    if key in seen:
                        out.append(m.start())
                    seen.add(key)
                args_next = key == b"args"
            elif depth == 2 and in_args and key in _ARGS_SET:
                if key in seen_args:
                    out.append(m.start())
                seen_args.add(key)
        elif tok in (b"{", b"["):
            depth += 1
            if depth == 2:
                in_args = tok == b"{" and args_next
                seen_args = set()
            args_next = False
        else:
            depth -= 1
            if depth < 2:
                in_args = False
    return out


def _scan_events(text: bytes, raws: list, base: int) -> tuple[int, list[int]]:
    """Duplicates of each event in ``raws`` (events of ``text``, in order), checked one by one."""
    n, pos = 0, 0
    offsets: list[int] = []
    for raw in raws:
        ev = bytes(raw)
        pos = text.find(ev, pos)
        if b"\\" not in ev and not any(ev.count(lit) > 1 for lit in _LITERALS):
            pos += len(ev)
            continue
        found = _event_duplicates(ev)
        n += len(found)
        offsets += [base + pos + o for o in found[: MAX_OFFSETS - len(offsets)]]
        pos += len(ev)
    return n, offsets


def find_duplicate_keys(text, events: list, base: int = 0, document: bool = False) -> tuple[int, list[int]]:
    """Duplicate keys of the events decoded from ``text`` (module docstring).

    Args:
        text: the JSON text the events were decoded from (bytes-like): a ``[...]`` chunk of events, or with
            ``document`` a whole document (an object with ``traceEvents`` or a bare list).
        events: the decoded :class:`~jobs.normalize.kineto.shapes.Event` structs, in order.
        base: document offset of ``text[0]``.
        document: ``text`` is a whole document.

    Returns:
        ``(count, offsets)``: the repeated keys, and the document byte offsets of the first
        :data:`~jobs.normalize.kineto.repair.MAX_OFFSETS` (each key's opening quote).
    """
    if not events:
        return 0, []
    text = text if isinstance(text, bytes) else bytes(text)
    raws = None
    events_text = text
    if document:  # the prefilter reads the event array alone (the header repeats "name", "id"...)
        top = _RAW_DOCUMENT.decode(text)
        raws = top if isinstance(top, list) else (top.traceEvents or [])
        events_text = b"[" + b",".join(raws) + b"]"
    if not _u00(events_text):
        lit = _literal_counts(events_text)
        if lit is not None and lit == _present_counts(events):
            return 0, []
    if raws is None:
        raws = _RAW_EVENTS.decode(text)
    return _scan_events(text, raws, base)
