"""A bounded fuzz pass (issue 33): Hypothesis damages real corpus traces — truncation, byte flips inside strings and
numbers, duplicated keys, reordered events, huge values, inserted garbage, gzip or not — and every damaged file must
end ingested or quarantined with a reason naming it, never raise, never hang (a deadline per file) and never exceed
the parse budget (the normalize stage's own limits, :class:`jobs.normalize.limits.ParseLimits`)."""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.landing.discover import CaptureFile
from jobs.normalize.job import normalize_file

TORCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "torch"
SOURCES = [
    "HolisticTraceAnalysis/critical_path/cuda_event_sync/event_sync_trace.json.gz",  # 23 KB, CUDA events and syncs
    "HolisticTraceAnalysis/triton_example/triton_example.json.gz",  # 17 KB, Triton kernels
]
_DOCS = {rel: gzip.decompress((TORCH / rel).read_bytes()) for rel in SOURCES}
_NUMBER = re.compile(rb'(?<=[:\[,\s])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?')
_STRING_BYTE = re.compile(rb'"[^"\\]{2,}"')


def _truncate(doc: bytes, r: random.Random) -> bytes:
    return doc[: r.randrange(1, len(doc))]


def _flip_in_string(doc: bytes, r: random.Random) -> bytes:
    spans = [m.span() for m in _STRING_BYTE.finditer(doc, 0, 200_000)]
    a, b = spans[r.randrange(len(spans))]
    i = r.randrange(a + 1, b - 1)
    return doc[:i] + bytes([r.randrange(256)]) + doc[i + 1 :]


def _flip_in_number(doc: bytes, r: random.Random) -> bytes:
    spans = [m.span() for m in _NUMBER.finditer(doc, 0, 200_000)]
    a, b = spans[r.randrange(len(spans))]
    i = r.randrange(a, b)
    return doc[:i] + r.choice([b"x", b".", b"-", b"e", b"9", b"\x00", b'"']) + doc[i + 1 :]


def _duplicate_keys(doc: bytes, r: random.Random) -> bytes:
    at = [m.end() for m in re.finditer(rb'\{\s*"(ph|name|ts)"', doc[:200_000])]
    i = at[r.randrange(len(at))] - len(b'"ts"') if at else 1
    return doc[:i] + b'"ts": -1, "dur": 7, "ph": "X", ' + doc[i:]


def _reorder_events(doc: bytes, r: random.Random) -> bytes:
    d = json.loads(doc)
    r.shuffle(d["traceEvents"])
    return json.dumps(d).encode()


def _huge_value(doc: bytes, r: random.Random) -> bytes:
    spans = [m.span() for m in _NUMBER.finditer(doc, 0, 200_000)]
    a, b = spans[r.randrange(len(spans))]
    huge = r.choice([b"1e308", b"-1e308", b"99999999999999999999999999", b"1e999", b"NaN", b"Infinity"])
    return doc[:a] + huge + doc[b:]


def _garbage(doc: bytes, r: random.Random) -> bytes:
    i = r.randrange(len(doc))
    return doc[:i] + bytes(r.randrange(256) for _ in range(r.randrange(1, 64))) + doc[i:]


DAMAGE = [_truncate, _flip_in_string, _flip_in_number, _duplicate_keys, _reorder_events, _huge_value, _garbage]


@settings(
    max_examples=400,
    deadline=20_000,  # ms per damaged file: a hang fails the example
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples in every run: a CI failure reproduces
    database=None,  # nothing written into the checkout
)
@given(
    source=st.sampled_from(SOURCES),
    damage=st.lists(st.sampled_from(DAMAGE), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    gz=st.booleans(),
)
def test_damaged_real_traces_end_ingested_or_quarantined_with_a_reason(source, damage, seed, gz):
    r = random.Random(seed)
    doc = _DOCS[source]
    for d in damage:
        try:
            doc = d(doc, r)
        except (ValueError, KeyError, IndexError):  # a damage that needs intact JSON after an earlier one
            continue
    data = gzip.compress(doc, 1) if gz else doc
    uri = f"/landing/fuzz/{Path(source).name}"
    task = CaptureFile(uri=uri, capture_id="fuzz", job_id="fuzz", size_bytes=len(data)).to_dict()
    cap, events = normalize_file(task, data)
    assert cap["status"] in ("ingested", "quarantined")
    if cap["status"] == "quarantined":
        assert cap["reason"].startswith(uri + ": ") and len(cap["reason"]) > len(uri) + 5
        assert "internal error" not in cap["reason"], cap["reason"]  # a parser bug, not the file's damage
        assert events is None or events.num_rows == 0
    else:
        assert events is not None and cap["n_events"] == events.num_rows


@pytest.mark.parametrize("source", SOURCES)
def test_the_undamaged_sources_ingest(source):
    data = (TORCH / source).read_bytes()
    task = CaptureFile(uri=source, capture_id="c", job_id="j", size_bytes=len(data)).to_dict()
    cap, events = normalize_file(task, data)
    assert cap["status"] == "ingested" and events.num_rows > 0
