"""Split a Chrome-trace document into decodable chunks of whole events, while streaming.

Memory is the reason: decoding a whole trace into Python objects costs ~2x the JSON size, on
top of the JSON itself. Instead the document is consumed piece by piece (see
:func:`jobs.normalize.container.iter_decoded`), and each run of complete events is decoded,
normalized to columns and dropped before the next one is read.

How a split is proven correct (no trust in formatting): a candidate boundary is a ``}`` followed
by ``,`` and ``{`` (raw newlines cannot occur inside JSON strings, but the check does not rely on
that); the chunk up to it must decode as a JSON array of event objects, otherwise an earlier
candidate is tried. At the end, the array end must close a valid array, and the document with the
event array replaced by ``[]`` must decode as a JSON object whose ``traceEvents`` is ``[]`` (or,
for a bare-list trace, nothing but whitespace may follow). Whatever fails these checks raises
:class:`NotSplittable` and the caller falls back to decoding the whole document (which also
produces the precise error message for invalid files).

Lenient repair per chunk: when a candidate chunk fails to decode at a defect that
:mod:`jobs.normalize.kineto.repair` fixes (:func:`jobs.normalize.kineto.repair.worth_repairing`: a control
character, a non-finite token, an unescaped quote, a decimal comma...), the chunk is repaired
(:func:`jobs.normalize.kineto.repair.repair_text`) and decoded again, so that such a file still streams in
bounded memory (``bug_cases.md`` B01, B02); :attr:`TraceSplitter.repairs` counts the repairs and
:attr:`TraceSplitter.first_repair_offset` is the document offset of the first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

import msgspec

from jobs.normalize.kineto.repair import MAX_OFFSETS, repair_text, worth_repairing

_START_OBJ = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPLIT = re.compile(rb"\}\s*,\s*\{")
_END = re.compile(rb"\}\s*\]")
_EMPTY_END = re.compile(rb"\[\s*\]")
_WS = b" \t\r\n"
_MAX_HEADER = 64 << 20
_MAX_TRIES = 32


def _append(work: bytearray, used: int, piece) -> tuple[bytearray, int]:
    """Write ``piece`` at ``work[used:]``, growing ``work`` (capacity) when needed."""
    end = used + len(piece)
    if end > len(work):
        try:
            work.extend(bytes(max(end - len(work), len(work) // 2)))
        except BufferError:  # still exported by a consumer that kept a chunk: copy instead
            work = bytearray(work[:used]) + bytes(max(len(piece), used))
    work[used:end] = piece
    return work, end


class NotSplittable(Exception):
    """The document cannot be processed chunk-wise; decode it whole instead."""


class Repairs:
    """Counts of lenient repairs (flag name -> occurrences), the document offset of the first, and the offsets of
    the repairs inside strings (flag -> first :data:`~jobs.normalize.kineto.repair.MAX_OFFSETS` offsets)."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.first_offset: int | None = None
        self.offsets: dict[str, list[int]] = {}

    def add(self, counts: dict, first: int | None, offsets: dict | None = None) -> None:
        """Merge the result of one :func:`~jobs.normalize.kineto.repair.repair_text` call."""
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        if first is not None and (self.first_offset is None or first < self.first_offset):
            self.first_offset = first
        for k, v in (offsets or {}).items():
            self.offsets[k] = sorted(self.offsets.get(k, []) + list(v))[:MAX_OFFSETS]


def decode_repairing(decode: Callable, text, base: int, repairs: Repairs):
    """``decode(text)``; on a decode error that :func:`~jobs.normalize.kineto.repair.worth_repairing`
    accepts, decode the repaired text instead and record the repairs (``base`` = document offset of
    ``text[0]``). Returns ``(value, text_decoded)``.

    Raises:
        msgspec.DecodeError: not valid JSON, even after the repair.
        msgspec.ValidationError: valid JSON of the wrong shape.
    """
    try:
        return decode(text), text
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as exc:
        if not worth_repairing(text, exc):
            raise
    offsets: dict = {}
    fixed, counts, first = repair_text(text, base, offsets)
    if not counts:
        return decode(text), text  # raises the original error
    value = decode(fixed)
    repairs.add(counts, first, offsets)
    return value, fixed


class Chunk:
    """One run of complete events: ``events`` (decoded list), ``text`` (``[...]`` bytes view) and ``base``
    (document offset of ``text[0]``; the text after a repair in the chunk is shifted by the repair's change in
    length).

    Both are views of a buffer the splitter reuses: a chunk (including raw ``args`` text) must not
    be used after the iterator is advanced.
    """

    __slots__ = ("events", "text", "base")

    def __init__(self, events: list, text: memoryview, base: int = 0):
        self.events = events
        self.text = text
        self.base = base


class TraceSplitter:
    """Iterate :class:`Chunk` s of a streamed trace document.

    After iteration: ``is_list`` (bare-list trace), ``header`` (decoded header object for object
    traces, else None), ``total_bytes`` (document size) and ``repairs`` (:class:`Repairs`) are set.

    Args:
        pieces: the decoded document in pieces (bytes-like).
        decode_chunk: decodes ``b"[{...},{...}]"`` into a list of events (msgspec decoder).
        decode_header: decodes the document with an empty event array into the header object.
        target_bytes: approximate chunk size.
    """

    def __init__(self, pieces: Iterable, decode_chunk: Callable, decode_header: Callable, target_bytes: int = 4 << 20):
        self._pieces = iter(pieces)
        self._decode_chunk = decode_chunk
        self._decode_header = decode_header
        self._target = target_bytes
        self.is_list = False
        self.header = None
        self.total_bytes = 0
        self.repairs = Repairs()
        self._base = 0  # document offset of work[0] (work[1:] is document text from base + 1 on)

    def _next_piece(self):
        """The next decoded piece (None at the end), counted into ``total_bytes``."""
        p = next(self._pieces, None)
        if p is not None:
            self.total_bytes += len(p)
        return p

    def __iter__(self) -> Iterator[Chunk]:
        buf = bytearray()
        start = None
        eof = False
        while start is None:
            p = self._next_piece()
            if p is None:
                eof = True
                break
            buf += p
            s = len(buf) - len(buf.lstrip(_WS))
            if s == len(buf):
                continue
            first = buf[s : s + 1]
            if first == b"[":
                self.is_list = True
                start = s
            elif first == b"{":
                m = _START_OBJ.search(buf)
                if m:
                    start = m.end() - 1
                elif len(buf) > _MAX_HEADER:
                    raise NotSplittable("no traceEvents array near the start")
            else:
                raise NotSplittable("not a JSON object or array")
        if start is None:
            raise NotSplittable("no traceEvents array")
        prefix = bytes(buf[:start])
        self._base = start
        work = bytearray(buf[start:])  # starts with "["; reused for every chunk (see Chunk)
        used = len(work)
        del buf
        while True:
            while not eof and used < self._target:
                p = self._next_piece()
                if p is None:
                    eof = True
                else:
                    work, used = _append(work, used, p)
            if eof:
                yield from self._finish(work, used, prefix)
                return
            chunk, nxt = self._split(work, used)
            if chunk is None:  # no boundary found yet (a huge event): read more
                p = self._next_piece()
                if p is None:
                    eof = True
                else:
                    work, used = _append(work, used, p)
                continue
            yield chunk
            chunk = None
            # keep "[" + the partial next event; the consumer is done with the previous chunk
            tail = work[nxt:used]
            work[1 : 1 + len(tail)] = tail
            used = 1 + len(tail)
            self._base += nxt - 1

    def _split(self, work: bytearray, used: int):
        """Cut ``work[:used]`` after its last whole event that decodes: ``(Chunk, cut)``, else ``(None, None)``."""
        lo = max(1, used - (1 << 20))
        cands = list(_SPLIT.finditer(work, lo, used))
        if not cands and lo > 1:
            cands = list(_SPLIT.finditer(work, 1, used))
        for m in reversed(cands[-_MAX_TRIES:]):
            k = m.start()  # the "}" closing the last event of this chunk
            saved = work[k + 1]
            work[k + 1] = 0x5D  # "]" over the "," or whitespace after it
            view = memoryview(work)[: k + 2]
            try:
                events, text = decode_repairing(self._decode_chunk, view, self._base, self.repairs)
            except msgspec.ValidationError as exc:
                view.release()
                work[k + 1] = saved
                raise NotSplittable(f"chunk is not a list of events: {exc}") from None
            except msgspec.DecodeError:
                view.release()
                work[k + 1] = saved
                continue
            if text is not view:
                view.release()
                view = memoryview(text)
            return Chunk(events, view, self._base), m.end() - 1
        return None, None

    def _finish(self, work: bytearray, used: int, prefix: bytes):
        """Yield the last chunk (up to the end of the ``traceEvents`` array); set ``header`` from prefix + trailer."""
        m0 = _EMPTY_END.match(work, 0, used)
        ends = [m0.end() - 1] if m0 else [m.end() - 1 for m in _END.finditer(work, 0, used)]
        for q in ends[:_MAX_TRIES]:
            view = memoryview(work)[: q + 1]
            if m0:
                events: list = []
            else:
                try:
                    events, text = decode_repairing(self._decode_chunk, view, self._base, self.repairs)
                except msgspec.ValidationError as exc:
                    view.release()
                    raise NotSplittable(f"chunk is not a list of events: {exc}") from None
                except msgspec.DecodeError:
                    view.release()
                    continue
                if text is not view:
                    view.release()
                    view = memoryview(text)
            trailer = bytes(work[q + 1 : used])
            if self.is_list:
                if prefix.strip(_WS) or trailer.strip(_WS):
                    raise NotSplittable("data around the top-level array")
            else:
                try:
                    self.header = decode_header(self._decode_header, prefix, trailer, self.repairs, self._base + q + 1)
                except msgspec.DecodeError as exc:
                    raise NotSplittable(f"header does not decode: {exc}") from None
                if getattr(self.header, "traceEvents", None) != []:
                    raise NotSplittable("traceEvents placeholder not found in the header")
            if events:
                yield Chunk(events, view, self._base)
            return
        raise NotSplittable("end of the traceEvents array not found")


def decode_header(decode: Callable, prefix: bytes, trailer: bytes, repairs: Repairs, trailer_offset: int = 0):
    """The header object of an object trace: ``prefix + b"[]" + trailer`` decoded, with the lenient
    repair of :func:`decode_repairing` (``trailer_offset``: document offset of ``trailer[0]``, for the
    offset of a repair in the trailer).

    Raises:
        msgspec.DecodeError: the header is not valid JSON.
    """
    local = Repairs()
    value, _ = decode_repairing(decode, prefix + b"[]" + trailer, 0, local)
    first = local.first_offset

    def doc_offset(o: int) -> int:  # offsets past the "[]" are in the trailer
        return trailer_offset + o - len(prefix) - 2 if o >= len(prefix) + 2 else o

    repairs.add(
        local.counts,
        None if first is None else doc_offset(first),
        {k: [doc_offset(o) for o in v] for k, v in local.offsets.items()},
    )
    return value
