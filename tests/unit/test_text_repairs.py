"""Issue 33, item 4: the text defects of real exporters that can be repaired locally are repaired and flagged with
their byte offsets, the rest stays quarantined (``jobs/normalize/kineto/repair.py``, ``parse.py``, ``dupkeys.py``):
a locale decimal comma (pytorch #191032), an unescaped quote inside a string (kineto PR #1459, pytorch #113001), a
file cut short (Trace Event Format, google/perfetto #926) and duplicate keys (catapult #4343). Each defect is
injected into a real Kineto trace and parsed on the Python path and the default engine (the C scanner hands the
damaged files to the Python path; duplicate keys, valid JSON, are counted by both engines alike)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from kineto_engines import parse_both

from jobs.normalize.errors import TraceError
from jobs.normalize.kineto.parse import FLAGS, parse_kineto
from jobs.normalize.kineto.repair import REPAIR_FLAGS
from jobs.normalize.limits import LimitExceeded
from jobs.publish.report.glossary import FLAG_GLOSSARY

TORCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "torch"
SRC = TORCH / "HolisticTraceAnalysis" / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz"
ENGINES = ["python", "auto"]
NEW_FLAGS = ("decimal_comma", "unescaped_quote", "truncated_tail", "duplicate_key")


@pytest.fixture(scope="module")
def doc() -> bytes:
    return gzip.decompress(SRC.read_bytes())


@pytest.fixture(scope="module")
def good(doc):
    return parse_kineto(doc, "t.json", engine="python")


def _damage(doc: bytes, old: bytes, new: bytes) -> tuple[bytes, int]:
    i = doc.index(old)
    return doc[:i] + new + doc[i + len(old) :], i


def _row(parsed, name: str, ts_us: int) -> dict:
    t = parsed.events.to_pylist()
    return next(r for r in t if r["name"] == name and r["ts_ns"] == ts_us * 1000)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_locale_decimal_comma_is_read_as_the_decimal_point(doc, good, engine):
    damaged, at = _damage(doc, b'"blocks per SM": 0.009259', b'"blocks per SM": 0,009259')
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert p.meta["flag_counts"]["decimal_comma"] == 1
    assert p.meta["repair_offsets"]["decimal_comma"] == [at + len(b'"blocks per SM": 0')]
    assert p.events.equals(good.events)  # 0.009259 in args_json, every event kept
    # a ts written with a decimal comma is read exactly (1707417525509905,5 us)
    damaged, at = _damage(doc, b'"ts": 1707417525509905, "dur"', b'"ts": 1707417525509905,5, "dur"')
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert p.meta["flag_counts"]["decimal_comma"] == 1 and p.meta["repair_offsets"]["decimal_comma"] == [at + 22]
    assert p.events.num_rows == good.events.num_rows
    assert 1707417525509905500 in p.events.column("ts_ns").to_pylist()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unescaped_quote_in_a_string_is_escaped_where_one_reading_fits(doc, good, engine):
    name = '{"device": "cpu", "dtype": "float32"}(12): run'
    damaged, at = _damage(doc, b'"name": "aten::ones"', b'"name": "' + name.encode() + b'"')
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert p.meta["flag_counts"]["unescaped_quote"] == 1
    assert p.meta["repair_offsets"]["unescaped_quote"] == [at + len(b'"name": "{')]
    assert p.events.num_rows == good.events.num_rows
    assert _row(p, name, 1707417525509905)["dur_ns"] == 2245_000
    # inside args: a thread name (kineto PR #1508)
    thread = 'custom_call_target="tpu_custom_call"'
    damaged, at = _damage(doc, b'"name": "stream 7 "', b'"name": "' + thread.encode() + b'"')
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert p.meta["flag_counts"]["unescaped_quote"] == 1
    assert p.meta["repair_offsets"]["unescaped_quote"] == [at + len(b'"name": "custom_call_target=')]
    assert p.events.num_rows == good.events.num_rows and thread in p.events.column("thread_name").to_pylist()
    # two readings (the name ends before "note" or after it): quarantined with the byte offset, as before
    damaged, at = _damage(doc, b'"name": "aten::ones"', b'"name": "aten"::ones", "note": "x"')
    with pytest.raises(TraceError, match=r"not valid JSON at byte (\d+)") as exc:
        parse_kineto(damaged, "t.json", engine=engine)
    assert int(re.search(r"byte (\d+)", str(exc.value)).group(1)) in range(at, at + 20)
    # two strings apart (a missing comma), not one string: not read as an unescaped quote
    damaged, at = _damage(doc, b'"cat": "cpu_op", "name": "aten::ones"', b'"cat": "cpu_op" "name": "aten::ones"')
    with pytest.raises(TraceError, match="not valid JSON at byte"):
        parse_kineto(damaged, "t.json", engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_truncated_file_keeps_its_complete_events_and_is_partial(doc, good, engine):
    starts = [m.start() for m in re.finditer(rb"\n  \{\n", doc)]  # each event of this Kineto layout
    damaged = doc[: starts[-3] + 40]  # cut inside the third event from the end
    cut = doc.rindex(b"}", 0, starts[-3]) + 1
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert {"truncated_tail", "partial_trace"} <= set(p.meta["flags"])
    assert p.meta["flag_counts"]["truncated_tail"] == len(damaged) - cut
    assert p.meta["repair_offsets"]["truncated_tail"] == [cut]
    kept = [i for i in good.events.column("event_id").to_pylist() if i < len(starts) - 3]
    assert p.events.column("event_id").to_pylist() == kept
    # no complete event: still quarantined as truncated
    with pytest.raises(TraceError, match="truncated JSON"):
        parse_kineto(doc[: starts[0] + 40], "t.json", engine=engine)
    # a file over the size limit is refused by the limit, never salvaged
    with pytest.raises(LimitExceeded, match="exceeds limit"):
        parse_kineto(SRC.read_bytes(), "t.json", engine=engine, max_uncompressed_bytes=len(doc) // 2)


def test_duplicate_keys_are_flagged_on_both_engines_and_the_last_value_is_kept(doc, good):
    damaged, at = _damage(doc, b'"ts": 1707417525509905, "dur"', b'"ts": 1, "ts": 1707417525509905, "dur"')
    damaged, at2 = _damage(damaged, b'"External id": 515,', b'"External id": 9, "External id": 515,')
    p = parse_both(damaged, "t.json")  # the Python path and the C scanner: equal tables and metadata
    assert p.meta["flag_counts"]["duplicate_key"] == 2
    assert p.meta["repair_offsets"]["duplicate_key"] == [at + len(b'"ts": 1, '), at2 + len(b'"External id": 9, ')]
    assert p.events.num_rows == good.events.num_rows
    assert p.events.column("ts_ns").equals(good.events.column("ts_ns"))
    assert p.events.column("external_id").equals(good.events.column("external_id"))
    # a key spelled with an escape is the same key
    damaged, at = _damage(doc, b'"name": "aten::ones"', b'"name": "x", "n\\u0061me": "aten::ones"')
    p = parse_both(damaged, "t.json")
    assert p.meta["flag_counts"]["duplicate_key"] == 1 and p.meta["repair_offsets"]["duplicate_key"] == [at + 13]
    assert p.events.column("name").equals(good.events.column("name"))
    assert "duplicate_key" not in parse_both(doc, "t.json").meta["flags"]


def test_every_new_flag_is_documented():
    assert set(NEW_FLAGS) <= set(FLAGS) and set(NEW_FLAGS) <= set(FLAG_GLOSSARY)
    assert {"decimal_comma", "unescaped_quote", "truncated_tail"} <= set(REPAIR_FLAGS)
