"""Golden tests: our critical path against HTA 0.5.0's own numbers on the torch corpus.

HTA's numbers come from ``tests/golden/hta_0_5_0.json`` when it has critical-path entries, else the
read-only reference ``../shared/reference/hta_golden/hta_corpus.json`` (``traces[<corpus key>]``:
``critical_path`` = ``critical_path_analysis(rank, "ProfilerStep", instance_id)``,
``critical_path_full_trace`` = ``annotation=""``, ``critical_path_hta_test_config`` = the AlexNet
annotation of HTA's unit test). Events come from our parser on the real corpus files.

Compared (``jobs.analyze.critical_path.rank.hta_critical_path``, HTA-compatible mode, µs rounding of
sub-µs traces as HTA does):

* path length (HTA ``total_duration_us``) within 1% on every analysis HTA completed — the
  ``HolisticTraceAnalysis/critical_path/*`` fixtures (which carry ``cuda_sync`` events: stream,
  event and context syncs, stream-wait-event) and all other traces with a ``ProfilerStep``;
* the split by HTA's ``bound_by`` within 1% of the path length on those fixtures;
* our window equals HTA's (``window_start_ts``/``window_end_ts``, relative µs).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.analyze.critical_path.rank import hta_critical_path
from jobs.normalize.kineto.parse import parse_kineto

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
_LOCAL_GOLDEN = REPO / "tests" / "golden" / "hta_0_5_0.json"
_SHARED_GOLDEN = REPO.parent / "shared" / "reference" / "hta_golden" / "hta_corpus.json"
TOLERANCE = 0.01
ANALYSES = ("critical_path", "critical_path_full_trace", "critical_path_hta_test_config")

pytestmark = pytest.mark.skipif(
    not CORPUS.is_dir() or not (_LOCAL_GOLDEN.exists() or _SHARED_GOLDEN.exists()),
    reason="needs ../shared/corpus and the HTA golden file",
)


@functools.lru_cache(maxsize=1)
def _golden() -> dict:
    for p in (_LOCAL_GOLDEN, _SHARED_GOLDEN):
        if p.exists():
            traces = json.loads(p.read_text())["traces"]
            if any(v.get("critical_path") for v in traces.values()):
                return traces
    return {}


def _cases() -> list:
    if not (_LOCAL_GOLDEN.exists() or _SHARED_GOLDEN.exists()):
        return []
    out = []
    for key, v in sorted(_golden().items()):
        for a in ANALYSES:
            c = v.get(a)
            if c and c.get("success"):
                out.append(pytest.param(key, a, id=f"{key.split('/', 1)[1][:60]}:{a}"))
    return out


@functools.lru_cache(maxsize=2)
def _events(key: str):
    data = (CORPUS / key).read_bytes()
    parsed = parse_kineto(data, key)
    raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    m = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', raw)
    t = parsed.events
    n = t.num_rows
    for c, val, typ in (
        ("date", "d", pa.string()),
        ("job_id", "j", pa.string()),
        ("attempt", 0, pa.int32()),
        ("rank", 0, pa.int32()),
        ("capture_id", "c", pa.string()),
    ):
        t = t.append_column(c, pa.array([val] * n, typ))
    return t, int(m.group(1)) if m else 0


@functools.cache
def _run(key: str, analysis: str) -> tuple[dict, dict]:
    """(HTA's golden entry, our numbers: length_ns, breakdown_ns by HTA name, window, flags)."""
    c = _golden()[key][analysis]
    events, base = _events(key)
    ann = c.get("annotation", "ProfilerStep") if analysis != "critical_path_full_trace" else ""
    inst = c.get("instance_id", 0) if ann else None
    cp = hta_critical_path(events, ann, inst, hta_us_rounding=True, time_base_ns=base)
    return c, {
        "length_ns": cp.length_ns,
        "breakdown_ns": cp.breakdown_ns(hta_names=True),
        "window": cp.graph.window,
        "flags": set(cp.rt.flags),
    }


@pytest.mark.parametrize("key,analysis", _cases())
def test_path_length_within_one_percent(key, analysis):
    c, ours = _run(key, analysis)
    hta_us = c["total_duration_us"]
    ours_us = ours["length_ns"] / 1000
    assert abs(ours_us - hta_us) <= TOLERANCE * hta_us, (ours_us, hta_us)


FIXTURES = [p for p in _cases() if "/critical_path/" in p.values[0]]


def test_fixtures_are_present():
    """HTA's critical-path fixtures with cuda_sync events are part of the comparison."""
    assert len(FIXTURES) >= 4


@pytest.mark.parametrize("key,analysis", FIXTURES)
def test_fixture_breakdown_within_one_percent(key, analysis):
    c, res = _run(key, analysis)
    hta = {k: v for k, v in c["bound_by_us"].items() if v}
    ours = {k: v / 1000 for k, v in res["breakdown_ns"].items() if v}
    total = c["total_duration_us"]
    for k in set(hta) | set(ours):
        assert abs(ours.get(k, 0) - hta.get(k, 0)) <= TOLERANCE * total, (k, ours, hta)
    assert c["has_cuda_sync_events"] and "no_cuda_sync_events" not in res["flags"]


@pytest.mark.parametrize("key,analysis", [p for p in _cases() if p.values[1] == "critical_path"])
def test_window_is_htas(key, analysis):
    c, res = _run(key, analysis)
    start, end = res["window"]
    assert (end - start) == (c["window_end_ts"] - c["window_start_ts"]) * 1000
