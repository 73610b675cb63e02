"""Issue 33, item 4: the exporter defects next to a value that can be repaired locally (``jobs/normalize/kineto/
repair.py``) — a trailing comma (pytorch #126703), a key without a value (pytorch PR #172353, kineto PR #1213), a bare
word as a value (kineto PR #129) — are repaired, flagged with their byte offsets, and keep every event; the same
characters inside a string are left alone."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from jobs.normalize.kineto.parse import FLAGS, parse_kineto
from jobs.normalize.kineto.repair import STRUCTURE_REPAIRS, repair_text
from jobs.publish.report.glossary import FLAG_GLOSSARY

TORCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "torch"
SRC = TORCH / "HolisticTraceAnalysis" / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz"


@pytest.fixture(scope="module")
def doc() -> bytes:
    return gzip.decompress(SRC.read_bytes())


def _damage(doc: bytes, old: bytes, new: bytes) -> tuple[bytes, int]:
    i = doc.index(old)
    return doc[:i] + new + doc[i + len(old) :], i


@pytest.mark.parametrize("engine", ["python", "auto"])
@pytest.mark.parametrize(
    "old,new,flag",
    [
        (b'"correlation": ', b'"correlation": , "x": 1, "y": ', "missing_value"),
        (b'"stream": ', b'"note": N/A, "stream": ', "bare_word"),
        (b'"sharedMemPerBlockOptin": 166912', b'"sharedMemPerBlockOptin": 166912,', "trailing_comma"),
    ],
)
def test_a_local_structure_defect_is_repaired_flagged_and_keeps_every_event(doc, engine, old, new, flag):
    good = parse_kineto(doc, "t.json", engine=engine)
    damaged, at = _damage(doc, old, new)
    p = parse_kineto(damaged, "t.json", engine=engine)
    assert flag in p.meta["flags"] and p.meta["flag_counts"][flag] == 1
    assert p.meta["repair_offsets"][flag][0] in range(at, at + len(new))
    assert p.events.num_rows == good.events.num_rows


def test_the_same_characters_inside_strings_are_left_alone():
    text = b'{"traceEvents": [], "a": "x, ]", "b": "k: ,", "c": "y: N/A, z"}'
    assert repair_text(text) == (text, {}, None)


def test_every_structure_repair_is_a_documented_flag():
    assert set(STRUCTURE_REPAIRS) <= set(FLAGS) and set(STRUCTURE_REPAIRS) <= set(FLAG_GLOSSARY)
