"""Container decoding: gzip detected from magic bytes, multi-member gzip, truncation, size cap."""

from __future__ import annotations

import gzip
import io
import zlib

import pytest

from jobs.normalize.container import decode_container
from jobs.normalize.errors import TraceError

DOC = b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'


def test_plain_json_is_returned_unchanged():
    out, kind = decode_container(DOC)
    assert (out, kind) == (DOC, "json")


def test_gzip_detected_from_magic_bytes_not_extension():
    out, kind = decode_container(gzip.compress(DOC))
    assert (out, kind) == (DOC, "gzip")


def test_multi_member_gzip_decodes_every_member():
    half = len(DOC) // 2
    data = gzip.compress(DOC[:half]) + gzip.compress(DOC[half:])
    out, kind = decode_container(data)
    assert out == DOC and kind == "gzip"
    assert gzip.decompress(data) == DOC  # stdlib agrees


def test_trailing_zero_padding_after_gzip_is_ignored():
    out, _ = decode_container(gzip.compress(DOC) + b"\x00" * 16)
    assert out == DOC


def test_truncated_gzip_raises():
    data = gzip.compress(DOC * 50)
    with pytest.raises(TraceError, match="truncated gzip stream"):
        decode_container(data[: len(data) // 2])


def test_corrupt_gzip_raises():
    data = bytearray(gzip.compress(DOC))
    data[12:20] = b"\xff" * 8
    with pytest.raises(TraceError, match="gzip"):
        decode_container(bytes(data))


def test_trailing_garbage_after_gzip_raises():
    with pytest.raises(TraceError, match="trailing data"):
        decode_container(gzip.compress(DOC) + b"garbage")


def test_decompressed_size_cap():
    big = gzip.compress(b" " * 100_000)
    with pytest.raises(TraceError, match="decompressed size exceeds limit"):
        decode_container(big, max_uncompressed_bytes=10_000)
    out, _ = decode_container(big, max_uncompressed_bytes=100_000)
    assert len(out) == 100_000


def test_cap_also_applies_to_plain_files():
    with pytest.raises(TraceError, match="exceeds limit"):
        decode_container(DOC, max_uncompressed_bytes=10)


def test_empty_file():
    with pytest.raises(TraceError, match="empty file"):
        decode_container(b"")


def test_zlib_stream_with_gzip_header_written_by_gzipfile():
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", filename="trace.json") as g:  # header with a file name
        g.write(DOC)
    out, kind = decode_container(buf.getvalue())
    assert out == DOC and kind == "gzip"
    assert zlib.crc32(out) == zlib.crc32(DOC)
