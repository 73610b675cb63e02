"""Limits on hostile input (jobs/normalize/limits.py, container.py): nesting depth, string length and
decompressed size. A file over a limit is quarantined with a reason naming the file and the limit,
on both parser engines, and the other files of the batch are unaffected.

Expected values follow from how each document is built: depth = open containers (document 1,
``traceEvents`` 2, event 3, ``args`` 4, …; a bare-list trace starts one lower); string length = bytes
between the quotes as written.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import tracemalloc
import zlib

import pytest

from jobs.landing.discover import CaptureFile
from jobs.normalize.job import normalize_file
from jobs.normalize.kineto import native
from jobs.normalize.kineto.parse import parse_kineto
from jobs.normalize.limits import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_STRING_BYTES,
    JsonLimitScanner,
    LimitExceeded,
    depth_reason,
    string_reason,
)

ENGINES = [
    "python",
    pytest.param("native", marks=pytest.mark.skipif(not native.AVAILABLE, reason="native scanner not built")),
]
GOOD = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}


def nested_args_doc(depth: int, bare_list: bool = False) -> bytes:
    """A one-event trace whose deepest container is at document depth ``depth`` (inside ``args``)."""
    top = 3 if bare_list else 4  # depth of the args object
    k = depth - top  # lists nested inside args["x"]
    ev = json.dumps({**GOOD, "args": {"x": "@@"}}).encode()
    ev = ev.replace(b'"@@"', b"[" * k + b"1" + b"]" * k)
    return b"[" + ev + b"]" if bare_list else b'{"traceEvents": [' + ev + b"]}"


def string_doc(n: int, where: str = "name", escape: bool = False) -> bytes:
    """A one-event trace with one string of ``n`` bytes as written, in ``where`` (random letters: gzip'd, it compresses
    like a real trace, not like a bomb)."""
    letters = base64.b64encode(random.Random(n).randbytes(n)).decode()[:n]
    body = ("\\n" * (n // 2) + "a" * (n % 2)) if escape else letters
    ev = {**GOOD}
    top = {}
    if where == "name":
        ev["name"] = "@@"
    elif where == "args":
        ev["args"] = {"Python stack": "@@"}
    else:
        top["deviceProperties"] = [{"name": "@@"}]
    out = json.dumps({"traceEvents": [ev], **top}).encode()
    return out.replace(b'"@@"', b'"' + body.encode() + b'"')


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("bare_list", [False, True])
def test_nesting_depth_limit_is_exact(engine, bare_list):
    ok = parse_kineto(nested_args_doc(DEFAULT_MAX_DEPTH, bare_list), "x.json", engine=engine)
    assert ok.events.num_rows == 1
    with pytest.raises(LimitExceeded, match="JSON nesting deeper than the limit of 256 levels"):
        parse_kineto(nested_args_doc(DEFAULT_MAX_DEPTH + 1, bare_list), "x.json", engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_very_deep_nesting_is_refused_before_any_recursion(engine):
    doc = b'{"traceEvents": [{"ph": "X", "ts": 1, "args": {"x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}}]}"
    with pytest.raises(LimitExceeded, match="limit of 256 levels"):
        parse_kineto(doc, "x.json", engine=engine)
    header = b'{"traceEvents": [], "deviceProperties": ' + b"[" * 300 + b"]" * 300 + b"}"
    with pytest.raises(LimitExceeded, match="limit of 256 levels"):
        parse_kineto(header, "x.json", engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("where", ["name", "args", "header"])
@pytest.mark.parametrize("escape", [False, True])
def test_string_length_limit_is_exact_and_counts_bytes_as_written(engine, where, escape):
    parse_kineto(string_doc(1000, where, escape), "x.json", engine=engine, max_string_bytes=1000)
    with pytest.raises(LimitExceeded, match="JSON string longer than the limit of 1000 bytes"):
        parse_kineto(string_doc(1001, where, escape), "x.json", engine=engine, max_string_bytes=1000)


@pytest.mark.parametrize("engine", ENGINES)
def test_default_string_limit_is_64_mib_and_streams(engine):
    assert DEFAULT_MAX_STRING_BYTES == 64 << 20
    doc = gzip.compress(string_doc(DEFAULT_MAX_STRING_BYTES + 1, "args"), 1)
    with pytest.raises(LimitExceeded, match=f"limit of {64 << 20} bytes"):
        parse_kineto(doc, "x.json.gz", engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_limits_are_configurable_and_checked(engine):
    doc = nested_args_doc(9)
    assert parse_kineto(doc, "x.json", engine=engine, max_depth=9).events.num_rows == 1
    with pytest.raises(LimitExceeded, match="limit of 8 levels"):
        parse_kineto(doc, "x.json", engine=engine, max_depth=8)
    with pytest.raises(ValueError, match="max_depth"):
        parse_kineto(doc, "x.json", engine=engine, max_depth=3)
    with pytest.raises(ValueError, match="max_string_bytes"):
        parse_kineto(doc, "x.json", engine=engine, max_string_bytes=0)


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_file_over_a_limit_is_quarantined_naming_file_and_limit_others_unaffected(engine, monkeypatch):
    monkeypatch.setenv("TRACELAKE_KINETO_ENGINE", engine)
    batch = {
        "landing/j/good.json": json.dumps({"traceEvents": [GOOD]}).encode(),
        "landing/j/deep.json": nested_args_doc(400),
        "landing/j/long.json.gz": gzip.compress(string_doc(DEFAULT_MAX_STRING_BYTES + 10, "name"), 1),
        "landing/j/good2.json": json.dumps({"traceEvents": [GOOD, GOOD]}).encode(),
    }
    rows = {}
    for uri, data in batch.items():
        task = CaptureFile(uri=uri, capture_id=uri, job_id="j").to_dict()
        rows[uri] = normalize_file(task, data)[0]
    assert rows["landing/j/good.json"]["status"] == rows["landing/j/good2.json"]["status"] == "ingested"
    assert rows["landing/j/good2.json"]["n_events"] == 2
    assert rows["landing/j/deep.json"]["status"] == "quarantined"
    assert rows["landing/j/deep.json"]["reason"] == f"landing/j/deep.json: {depth_reason(256)}"
    assert rows["landing/j/long.json.gz"]["reason"] == f"landing/j/long.json.gz: {string_reason(64 << 20)}"


def test_limit_scanner_agrees_with_a_byte_by_byte_reference_on_any_split():
    """The vectorized scanner against an obvious state machine, on random JSON cut anywhere."""

    def ref(doc):
        depth = maxd = slen = maxs = 0
        ins = esc = False
        for c in doc:
            if ins:
                if esc:
                    esc = False
                elif c == 0x5C:
                    esc = True
                elif c == 0x22:
                    ins = False
                    maxs = max(maxs, slen)
                    continue
                slen += 1
            elif c == 0x22:
                ins, slen = True, 0
            elif c in b"{[":
                depth += 1
                maxd = max(maxd, depth)
            elif c in b"}]":
                depth -= 1
        return maxd, maxs

    def value(d, rnd):
        r = rnd.random()
        if d > 10 or r < 0.35:
            return rnd.choice(['a"b', "\\", 'x\\"y', "[{}]", '\\\\"', "ab" * rnd.randint(0, 20), '"', "\\\\\\\""])
        if r < 0.65:
            return [value(d + 1, rnd) for _ in range(rnd.randint(0, 3))]
        return {f"k{i}": value(d + 1, rnd) for i in range(rnd.randint(0, 3))}

    rnd = random.Random(7)
    for _ in range(400):
        doc = json.dumps(value(0, rnd)).encode()
        maxd, maxs = ref(doc)
        cuts = sorted(rnd.sample(range(len(doc) + 1), min(len(doc) + 1, 4)))
        pieces = [doc[a:b] for a, b in zip([0, *cuts], [*cuts, len(doc)])]
        for lim_d, lim_s in ((max(maxd, 4), max(maxs, 1)), (maxd - 1, 10**9), (10**6, maxs - 1)):
            if lim_d < 4 or lim_s < 1:
                continue
            s = JsonLimitScanner(lim_d, lim_s)
            try:
                for p in pieces:
                    s.feed(p)
                ok = True
            except LimitExceeded:
                ok = False
            assert ok == (maxd <= lim_d and maxs <= lim_s), (doc, lim_d, lim_s)


@pytest.mark.parametrize(
    "engine",
    [
        "python",
        "auto",
        pytest.param("native", marks=pytest.mark.skipif(not native.AVAILABLE, reason="native scanner not built")),
    ],
)
def test_gzip_bomb_is_quarantined_without_inflating_it(engine):
    """~64 KB of gzip that inflates to 64 MiB (valid start, then whitespace), against a 1 MiB cap."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [c.compress(b'{"traceEvents": [')]
    block = b" " * (1 << 20)
    parts += [c.compress(block) for _ in range(64)]
    parts.append(c.compress(b"]}") + c.flush())
    bomb = b"".join(parts)
    assert len(bomb) < 80_000
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded, match=f"decompressed size exceeds limit of {1 << 20} bytes"):
            parse_kineto(bomb, "bomb.json.gz", engine=engine, max_uncompressed_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, peak  # bounded by one gunzip piece (4 MiB), not the 64 MiB inside
