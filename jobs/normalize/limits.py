"""Limits on hostile input: nesting depth of the JSON document and length of one JSON string.

A trace is untrusted input. Two shapes of JSON cost a parser far more than their size suggests and
never occur in a real profiler trace, so a file that has them is quarantined (``TraceError`` naming
the limit; the caller prefixes the file's URI) instead of being decoded:

* **nesting depth** — number of open ``{``/``[`` containers, the top-level value counting 1. Deep
  nesting makes recursive decoders (msgspec, the C scanner) recurse once per level; Python's
  recursion limit (~1000) is then the only bound. A Kineto trace nests at most ~8 levels (document
  → ``traceEvents`` → event → ``args`` → ``Input Dims`` → one tensor's dims → …).
  Default :data:`DEFAULT_MAX_DEPTH` = 256: 30× the deepest real trace, far below the recursion limit.
* **string length** — bytes of one JSON string literal as written (between its quotes, escapes
  counted as written). A string value is held in one buffer by every decoder, and the Arrow string
  columns use 32-bit offsets (2 GiB per column chunk). The longest real values are templated kernel
  names and Python stacks (tens of KB). Default :data:`DEFAULT_MAX_STRING_BYTES` = 64 MiB: 1000× the
  longest real value, small enough that one string cannot exhaust a worker. This is a limit on one
  *value*, not on the document: documents of any size stream (the decompressed-size cap,
  :data:`DEFAULT_MAX_UNCOMPRESSED_BYTES`, enforced by :mod:`jobs.normalize.container`, bounds those).

:class:`JsonLimitScanner` checks both on a document streamed in pieces, vectorized with numpy (a few
passes over each piece, no per-byte Python loop). It relies only on the JSON string grammar: outside
strings only brackets matter, a string ends at the first ``"`` not preceded by an odd run of
backslashes. It is not a validator (the decoders validate); on invalid JSON its result is unspecified
but bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import psutil
from pydantic import BaseModel, ConfigDict, Field

from jobs.normalize.errors import TraceError

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_STRING_BYTES",
    "DEFAULT_MAX_COMPRESSION_RATIO",
    "DEFAULT_MAX_PARSE_MEMORY_BYTES",
    "DEFAULT_MAX_PARSE_SECONDS",
    "DEFAULT_MAX_UNCOMPRESSED_BYTES",
    "JsonLimitScanner",
    "LimitExceeded",
    "ParseBudget",
    "ParseLimits",
    "check_budget",
    "parse_budget",
    "check_limits",
    "depth_reason",
    "string_reason",
    "validate_limits",
]

#: Default cap on the nesting depth of a trace document (see the module docstring).
DEFAULT_MAX_DEPTH = 256
#: Default cap on the length of one JSON string literal, bytes (see the module docstring).
DEFAULT_MAX_STRING_BYTES = 64 << 20
#: Default cap on the decoded size of one document, bytes (enforced by :mod:`jobs.normalize.container`).
DEFAULT_MAX_UNCOMPRESSED_BYTES = 8 << 30  # 8 GiB
#: Default cap on decoded ÷ stored bytes of a gzip file once it has decoded :data:`RATIO_FLOOR_BYTES`: real traces
#: compress 14–30× (the corpus), a gzip bomb ~1000× (enforced by :mod:`jobs.normalize.container` as bytes arrive).
DEFAULT_MAX_COMPRESSION_RATIO = 200.0
#: Decoded bytes below which the ratio is not judged (a small file may compress very well).
RATIO_FLOOR_BYTES = 64 << 20
#: Default ceiling on a worker's resident memory while it parses one file, bytes: parsing holds about 2.2× the
#: decoded document, so the 8 GiB size cap alone would allow ~17 GB for one file.
DEFAULT_MAX_PARSE_MEMORY_BYTES = 6 << 30
#: Default wall-clock limit of one file's parse, s (the largest corpus trace parses in under 10 s on one core).
DEFAULT_MAX_PARSE_SECONDS = 900.0

_QUOTE, _BSLASH = 0x22, 0x5C
_SLICE = 1 << 20  # bytes examined at once by JsonLimitScanner.feed
_DELTA = np.zeros(256, np.int64)
_DELTA[[0x7B, 0x5B]] = 1
_DELTA[[0x7D, 0x5D]] = -1


class LimitExceeded(TraceError):
    """A document exceeds :data:`DEFAULT_MAX_DEPTH`-style limits; quarantine it without parsing further."""


def depth_reason(max_depth: int) -> str:
    """Quarantine reason for a document nested deeper than ``max_depth`` (same text on every engine)."""
    return f"JSON nesting deeper than the limit of {max_depth} levels (hostile or corrupt input)"


def string_reason(max_string_bytes: int) -> str:
    """Quarantine reason for a string literal longer than ``max_string_bytes`` (same text on every engine)."""
    return f"JSON string longer than the limit of {max_string_bytes} bytes (hostile or corrupt input)"


class ParseLimits(BaseModel):
    """The limits on one trace file, as the normalize stage hands them to every worker (a task's ``limits``).

    Attributes:
        max_depth: JSON nesting depth (>= 4; default :data:`DEFAULT_MAX_DEPTH`).
        max_string_bytes: one string literal, bytes (>= 1; default :data:`DEFAULT_MAX_STRING_BYTES`).
        max_uncompressed_bytes: the decoded document, bytes (>= 1; default 8 GiB,
            :data:`DEFAULT_MAX_UNCOMPRESSED_BYTES`); also the most bytes read of one stored file.
        max_memory_bytes: the worker's resident memory while it parses one file (>= 64 MiB; default
            :data:`DEFAULT_MAX_PARSE_MEMORY_BYTES`).
        max_seconds: wall-clock time of one file's parse (> 0; default :data:`DEFAULT_MAX_PARSE_SECONDS`).

    Raises:
        pydantic.ValidationError: a limit out of range.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=4)
    max_string_bytes: int = Field(DEFAULT_MAX_STRING_BYTES, ge=1)
    max_uncompressed_bytes: int = Field(DEFAULT_MAX_UNCOMPRESSED_BYTES, ge=1)
    max_memory_bytes: int = Field(DEFAULT_MAX_PARSE_MEMORY_BYTES, ge=64 << 20)
    max_seconds: float = Field(DEFAULT_MAX_PARSE_SECONDS, gt=0)


class ParseBudget:
    """The memory ceiling and wall-clock limit of one file's parse, checked where the parse can stop cleanly (each
    decoded piece, the end of each stage): :meth:`check` raises :class:`LimitExceeded` with the figure, the worker
    quarantines that file and goes on with the next (the parse's objects are freed as the error unwinds).

    Memory is the worker process's resident set (``psutil``) while it parses the file: the ceiling protects the
    machine, whatever the worker held before (a worker's own baseline is a few hundred MiB)."""

    def __init__(
        self, max_memory_bytes: int = DEFAULT_MAX_PARSE_MEMORY_BYTES, max_seconds: float = DEFAULT_MAX_PARSE_SECONDS
    ):
        self.max_memory_bytes, self.max_seconds = int(max_memory_bytes), float(max_seconds)
        self._proc = psutil.Process()
        self.t0 = time.monotonic()

    def check(self) -> None:
        """Raises:
        LimitExceeded: the parse ran past ``max_seconds`` or grew the resident memory past ``max_memory_bytes``.
        """
        elapsed = time.monotonic() - self.t0
        if elapsed > self.max_seconds:
            raise LimitExceeded(f"parse ran past the limit of {self.max_seconds:g} s ({elapsed:.1f} s so far)")
        rss = self._proc.memory_info().rss
        if rss > self.max_memory_bytes:
            raise LimitExceeded(
                f"parse memory past the ceiling of {self.max_memory_bytes >> 20} MiB ({rss >> 20} MiB resident)"
            )


_BUDGET: ContextVar[ParseBudget | None] = ContextVar("tracelake_parse_budget", default=None)


@contextmanager
def parse_budget(
    max_memory_bytes: int = DEFAULT_MAX_PARSE_MEMORY_BYTES, max_seconds: float = DEFAULT_MAX_PARSE_SECONDS
) -> Iterator[ParseBudget]:
    """Run one file's parse under a :class:`ParseBudget` that :func:`check_budget` checks."""
    token = _BUDGET.set(ParseBudget(max_memory_bytes, max_seconds))
    try:
        yield _BUDGET.get()  # type: ignore[misc]
    finally:
        _BUDGET.reset(token)


def check_budget() -> None:
    """Check the current file's :class:`ParseBudget` (nothing outside :func:`parse_budget`).

    Raises:
        LimitExceeded: as :meth:`ParseBudget.check`.
    """
    b = _BUDGET.get()
    if b is not None:
        b.check()


def validate_limits(max_depth: int, max_string_bytes: int) -> None:
    """Raise ``ValueError`` unless both limits are usable (depth >= 4: document, event array, event, args)."""
    if not isinstance(max_depth, int) or max_depth < 4:
        raise ValueError(f"max_depth must be an int >= 4, not {max_depth!r}")
    if not isinstance(max_string_bytes, int) or max_string_bytes < 1:
        raise ValueError(f"max_string_bytes must be a positive int, not {max_string_bytes!r}")


class JsonLimitScanner:
    """Incremental depth / string-length check of one JSON document fed in pieces.

    Args:
        max_depth: most open containers allowed at once (the top-level value counts 1).
        max_string_bytes: longest string literal allowed, bytes between the quotes as written.

    Call :meth:`feed` with consecutive pieces of the document (any split points); it raises
    :class:`LimitExceeded` as soon as a limit is exceeded. State kept between pieces: inside a string
    or not, the open string's length so far, the current depth, and the parity of a trailing run of
    backslashes.
    """

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH, max_string_bytes: int = DEFAULT_MAX_STRING_BYTES):
        validate_limits(max_depth, max_string_bytes)
        self.max_depth = max_depth
        self.max_string_bytes = max_string_bytes
        self.depth = 0
        self.in_string = False
        self.string_len = 0  # bytes of the open string seen in earlier pieces
        self._bs_carry = 0  # length of the backslash run that ends the previous piece (inside a string)

    def feed(self, piece) -> None:
        """Check the next piece of the document (bytes-like), in slices of 1 MiB (bounded temporaries).

        Raises:
            LimitExceeded: the document so far nests deeper than ``max_depth`` or holds a longer
                string than ``max_string_bytes``.
        """
        mv = memoryview(piece).cast("B")
        for off in range(0, len(mv), _SLICE):
            self._feed(mv[off : off + _SLICE])

    def _feed(self, piece) -> None:
        b = np.frombuffer(piece, np.uint8)
        n = b.size
        if n == 0:
            return
        c = b | 0x20  # one pass: { [ -> 0x7B, } ] -> 0x7D, \ -> 0x7C (also |), " -> 0x22 (also 0x02)
        pos = np.flatnonzero((c == 0x22) | (c == 0x7C) | (c == 0x7B) | (c == 0x7D))
        del c
        ch = b[pos]
        # quotes not escaped by an odd run of backslashes
        q = pos[ch == _QUOTE]
        bs = pos[ch == _BSLASH]
        if bs.size and q.size:
            brk = np.flatnonzero(np.diff(bs) != 1) + 1
            starts = np.concatenate(([0], brk))
            run_end = bs[np.concatenate((brk - 1, [bs.size - 1]))] + 1  # index after each run
            run_len = run_end - bs[starts]
            if bs[0] == 0:
                run_len[0] += self._bs_carry
            k = np.searchsorted(run_end, q)
            hit = k < run_end.size
            hit[hit] = run_end[k[hit]] == q[hit]
            escaped = np.zeros(q.size, bool)
            escaped[hit] = (run_len[k[hit]] & 1) == 1
            q = q[~escaped]
        if q.size and q[0] == 0 and self._bs_carry & 1:  # escaped by the run that ended the last piece
            q = q[1:]
        # a trailing backslash run escapes the first byte of the next piece
        if bs.size and bs[-1] == n - 1:
            brk = np.flatnonzero(np.diff(bs) != 1)
            first = bs[brk[-1] + 1] if brk.size else bs[0]
            run = n - int(first) + (self._bs_carry if first == 0 else 0)
            self._bs_carry = run
        else:
            self._bs_carry = 0
        # string lengths: quotes alternate open/close starting from the carried state
        in0 = self.in_string
        if q.size:
            if in0:
                first_len = self.string_len + int(q[0])
                if first_len > self.max_string_bytes:
                    raise LimitExceeded(string_reason(self.max_string_bytes))
                opens, closes = q[1::2], q[2::2]
            else:
                opens, closes = q[0::2], q[1::2]
            m = closes.size
            if m and int((closes - opens[:m] - 1).max()) > self.max_string_bytes:
                raise LimitExceeded(string_reason(self.max_string_bytes))
            self.in_string = in0 ^ bool(q.size & 1)
            if self.in_string:
                self.string_len = n - int(q[-1]) - 1
        elif in0:
            self.string_len += n
        else:
            self.string_len = 0
        if self.in_string and self.string_len > self.max_string_bytes:
            raise LimitExceeded(string_reason(self.max_string_bytes))
        # depth over the brackets outside strings
        delta = _DELTA[ch]
        br = pos[delta != 0]
        if br.size:
            before = np.searchsorted(q, br)  # unescaped quotes before each bracket
            outside = ((before + int(in0)) & 1) == 0
            br = br[outside]
        if br.size:
            cum = np.cumsum(_DELTA[b[br]]) + self.depth
            if int(cum.max()) > self.max_depth:
                raise LimitExceeded(depth_reason(self.max_depth))
            self.depth = int(cum[-1])


def check_limits(
    doc,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
    piece_bytes: int = 4 << 20,
) -> None:
    """Check a whole document (bytes-like) in pieces of ``piece_bytes`` (bounded temporary memory).

    Raises:
        LimitExceeded: see :meth:`JsonLimitScanner.feed`.
    """
    s = JsonLimitScanner(max_depth, max_string_bytes)
    mv = memoryview(doc)
    for off in range(0, len(mv), piece_bytes):
        s.feed(mv[off : off + piece_bytes])
