"""Container decoding of raw trace files: gzip (detected from magic bytes) or plain bytes."""

from __future__ import annotations

import zlib

from jobs.normalize.errors import TraceError
from jobs.normalize.limits import (  # the size and ratio caps live with the other limits
    DEFAULT_MAX_COMPRESSION_RATIO,
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    RATIO_FLOOR_BYTES,
    LimitExceeded,
    check_budget,
)


def check_ratio(decoded: int, stored: int, max_ratio: float = DEFAULT_MAX_COMPRESSION_RATIO) -> None:
    """Raise :class:`LimitExceeded` when a gzip file has decoded more than ``max_ratio`` × its ``stored`` bytes,
    once past :data:`jobs.normalize.limits.RATIO_FLOOR_BYTES` decoded (a gzip bomb stops there, not at the size
    cap)."""
    if decoded > RATIO_FLOOR_BYTES and decoded > max_ratio * max(stored, 1):
        raise LimitExceeded(
            f"decompression ratio above the limit of {max_ratio:g}:1 ({decoded} bytes decoded from {stored} stored; "
            "real traces compress about 15-30:1: a gzip bomb?)"
        )


GZIP_MAGIC = b"\x1f\x8b"


def decode_container(data: bytes, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> tuple[bytes, str]:
    """Return the decoded document of a raw trace file and its container kind.

    Gzip is detected from the magic bytes ``1f 8b`` (never from the file extension); every gzip
    member is decoded to EOF (multi-member files, e.g. written by ``cat a.gz b.gz``, are
    concatenated). Trailing zero padding after the last member is ignored.

    Args:
        data: the file's bytes as stored.
        max_uncompressed_bytes: cap on the decoded size in bytes (default 8 GiB); protects workers
            from gzip bombs.

    Returns:
        ``(document_bytes, container)`` with ``container`` ``"gzip"`` or ``"json"``.

    Raises:
        TraceError: ``"empty file"``, ``"truncated gzip stream"``, ``"corrupt gzip stream: ..."``,
            ``"trailing data after gzip stream at byte N"``, or
            :class:`~jobs.normalize.limits.LimitExceeded` ``"decompressed size exceeds limit of N bytes"``
            (raised as soon as the output passes the cap: a gzip bomb is never inflated whole).
    """
    if not data:
        raise TraceError("empty file")
    if data[:2] != GZIP_MAGIC:
        if len(data) > max_uncompressed_bytes:
            raise LimitExceeded(f"decompressed size exceeds limit of {max_uncompressed_bytes} bytes")
        return bytes(data) if not isinstance(data, bytes) else data, "json"
    parts: list[bytes] = []
    total = 0
    buf = memoryview(data)
    consumed = 0
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk_in = buf
        while True:
            try:
                out = d.decompress(chunk_in, max_uncompressed_bytes - total + 1)
            except zlib.error as exc:
                raise TraceError(f"corrupt gzip stream: {exc}") from None
            total += len(out)
            if total > max_uncompressed_bytes:
                raise LimitExceeded(f"decompressed size exceeds limit of {max_uncompressed_bytes} bytes")
            check_ratio(total, len(data))
            if out:
                parts.append(out)
            chunk_in = d.unconsumed_tail
            if d.eof or not chunk_in:
                break
        if not d.eof:
            raise TraceError("truncated gzip stream")
        rest = d.unused_data
        consumed = len(data) - len(rest)
        if not rest:
            break
        if rest[:2] != GZIP_MAGIC:
            if rest.strip(b"\x00") == b"":
                break
            raise TraceError(f"trailing data after gzip stream at byte {consumed}")
        buf = memoryview(rest)
    if not parts:
        return b"", "gzip"
    doc = parts[0] if len(parts) == 1 else b"".join(parts)
    return doc, "gzip"


def iter_decoded(
    data: bytes,
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
    piece_bytes: int = 4 << 20,
    zlib_module=zlib,
    max_ratio: float = DEFAULT_MAX_COMPRESSION_RATIO,
):
    """Yield the decoded document in pieces of at most ``piece_bytes`` (streaming gunzip).

    Same container rules and errors as :func:`decode_container`, but the whole document is never
    held in memory: gzip input is fed in 256 KiB slices and output is bounded per piece. Each piece checks the
    decompression ratio (:func:`check_ratio`, ``max_ratio``) and the file's :class:`~jobs.normalize.limits.ParseBudget`.
    Plain files are yielded as zero-copy ``memoryview`` slices. ``zlib_module`` is any module with
    zlib's ``decompressobj``/``MAX_WBITS``/``error`` interface (``isal.isal_zlib`` is ~3x faster).

    Raises:
        TraceError: as :func:`decode_container` (raised when the problem is reached).
    """
    if not data:
        raise TraceError("empty file")
    mv = memoryview(data)
    n = len(data)
    if data[:2] != GZIP_MAGIC:
        if n > max_uncompressed_bytes:
            raise LimitExceeded(f"decompressed size exceeds limit of {max_uncompressed_bytes} bytes")
        for off in range(0, n, piece_bytes):
            check_budget()
            yield mv[off : off + piece_bytes]
        return
    in_piece = 256 << 10
    total = 0
    pos = 0
    d = zlib_module.decompressobj(16 + zlib_module.MAX_WBITS)
    pending: bytes | memoryview = b""
    while True:
        if not pending and pos < n:
            pending = mv[pos : pos + in_piece]
            pos += len(pending)
        try:
            out = d.decompress(pending, piece_bytes)
        except zlib_module.error as exc:
            raise TraceError(f"corrupt gzip stream: {exc}") from None
        pending = d.unconsumed_tail
        total += len(out)
        if total > max_uncompressed_bytes:
            raise LimitExceeded(f"decompressed size exceeds limit of {max_uncompressed_bytes} bytes")
        check_ratio(total, n, max_ratio)
        check_budget()  # the file's memory ceiling and wall-clock limit, at every piece
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            consumed = pos - len(rest)
            if not rest and pos >= n:
                return
            head = (bytes(rest[:2]) + bytes(mv[pos : pos + 2]))[:2]
            if head != GZIP_MAGIC:
                if bytes(rest).strip(b"\x00") == b"" and bytes(mv[pos:]).strip(b"\x00") == b"":
                    return
                raise TraceError(f"trailing data after gzip stream at byte {consumed}")
            d = zlib_module.decompressobj(16 + zlib_module.MAX_WBITS)
            pending = rest
            continue
        if not out and not pending and pos >= n:
            raise TraceError("truncated gzip stream")
