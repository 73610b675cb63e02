"""Golden tests: our ``ranks`` breakdown against HTA 0.5.0's own numbers on the torch corpus.

HTA's numbers come from ``tests/golden/hta_0_5_0.json`` (written by ``make_hta_golden.py``), or,
when that file is absent, the read-only reference ``../shared/reference/hta_golden/hta_corpus.json``
(same ``traces[<corpus key>]`` layout). Events come from our parser
(``jobs.normalize.kineto.parse.parse_kineto``) on the real corpus files under ``../shared/corpus``.

What is compared, per corpus file (= per rank; the DLRM job has 8 ranks, ``trace_filter`` 2):

* HTA's loading rules (:mod:`jobs.analyze.trace.hta_filter`) keep exactly the rows HTA kept, by category.
* ``ranks`` idle / compute / non-compute / overlap % agree with HTA within 0.5 percentage points
  when we reproduce HTA's µs rounding (``hta_us_rounding=True``).
* In the default mode we keep exact ns, on purpose. On whole-µs traces that changes nothing (the
  0.5 pp tolerance holds). On sub-µs traces HTA rounds every event inward (``ts = ceil``,
  ``end = floor``), which shortens each event by up to 2 µs; our exact values then differ by more,
  but never by more than that rounding can explain (test below states the bound).
* Where HTA fails (no GPU events; the 2021-01 bare-list trace) our behaviour is asserted explicitly.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from jobs.analyze.hta.breakdown import analyze_rank
from jobs.analyze.trace import hta_filter
from jobs.analyze.trace.model import typed_events

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
_LOCAL_GOLDEN = REPO / "tests" / "golden" / "hta_0_5_0.json"
_SHARED_GOLDEN = REPO.parent / "shared" / "reference" / "hta_golden" / "hta_corpus.json"
GOLDEN_PATH = _LOCAL_GOLDEN if _LOCAL_GOLDEN.exists() else _SHARED_GOLDEN
PCT_TOLERANCE = 0.5  # percentage points

pytestmark = pytest.mark.skipif(
    not CORPUS.is_dir() or not GOLDEN_PATH.exists(), reason="needs ../shared/corpus and the HTA golden file"
)


@functools.lru_cache(maxsize=1)
def _golden() -> dict:
    return json.loads(GOLDEN_PATH.read_text())["traces"]


def _keys(predicate) -> list[str]:
    if not GOLDEN_PATH.exists():
        return []
    return sorted(k for k, v in _golden().items() if predicate(v))


def _hta_ok(v) -> bool:
    return bool(v.get("temporal_breakdown")) and "temporal_breakdown" not in (v.get("errors") or {})


ANALYZABLE = _keys(_hta_ok)
NO_GPU = _keys(lambda v: "temporal_breakdown" in (v.get("errors") or {}) and "load" not in v["errors"])
LOAD_FAILED = _keys(lambda v: "load" in (v.get("errors") or {}))


def _raw(key: str) -> bytes:
    data = (CORPUS / key).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _time_base_ns(key: str) -> int:
    m = re.search(rb'"baseTimeNanoseconds"\s*:\s*(\d+)', _raw(key))
    return int(m.group(1)) if m else 0


class Case:
    """One corpus file: its parsed events and our analyses (computed once, lazily)."""

    def __init__(self, key: str):
        self.key = key
        self.golden = _golden()[key]

    @functools.cached_property
    def events(self) -> pa.Table:
        """The parser's events, identity columns added, cast to EVENTS types."""
        from jobs.normalize.kineto.parse import parse_kineto

        ev = parse_kineto((CORPUS / self.key).read_bytes(), str(CORPUS / self.key)).events
        n = ev.num_rows
        for name, value, typ in (
            ("date", "2024-01-01", pa.string()),
            ("job_id", "golden", pa.string()),
            ("attempt", 0, pa.int32()),
            ("rank", 0, pa.int32()),
            ("capture_id", self.key, pa.string()),
        ):
            if name in ev.column_names:
                ev = ev.drop_columns([name])
            ev = ev.append_column(name, pa.array([value] * n, typ))
        return typed_events(ev)

    @functools.cached_property
    def time_base_ns(self) -> int:
        return _time_base_ns(self.key)

    def analyze(self, rounding: bool) -> tuple[dict, list[dict]]:
        attr = "_rounded" if rounding else "_exact"
        if not hasattr(self, attr):
            kw = dict(hta_us_rounding=True, time_base_ns=self.time_base_ns) if rounding else {}
            steps, ranks = analyze_rank(self.events, **kw)
            setattr(self, attr, (ranks.to_pylist()[0], steps.to_pylist()))
        return getattr(self, attr)

    @functools.cached_property
    def sub_us(self) -> bool:
        """Whether the trace has sub-µs timestamps, i.e. HTA rounded it."""
        ts = self.events.column("ts_ns").to_numpy(zero_copy_only=False)
        return bool(np.any((ts - self.time_base_ns) % 1000))


# Module-scoped parametrized fixtures: pytest runs all tests of one file together, so each
# corpus file is parsed once and only one is held in memory at a time.
@pytest.fixture(scope="module", params=ANALYZABLE)
def case(request) -> Case:
    return Case(request.param)


@pytest.fixture(scope="module", params=NO_GPU)
def no_gpu_case(request) -> Case:
    return Case(request.param)


@pytest.fixture(scope="module", params=LOAD_FAILED)
def load_failed_case(request) -> Case:
    return Case(request.param)


def _hta(key: str) -> dict:
    g = _golden()[key]
    tb = g["temporal_breakdown"]
    return {
        "idle_pct": tb["idle_time_pctg"],
        "compute_pct": tb["compute_time_pctg"],
        "non_compute_pct": tb["non_compute_time_pctg"],
        "overlap_pct": (g.get("comm_comp_overlap") or {}).get("comp_comm_overlap_pctg"),
        "kernel_time_us": tb["kernel_time(us)"],
        "n_gpu_rows": g["hta_gpu_rows"],
    }


def _assert_pcts_close(ours: dict, hta: dict, tol: float, key: str):
    for col in ("idle_pct", "compute_pct", "non_compute_pct", "overlap_pct"):
        if hta[col] is None:
            assert ours[col] is None, f"{key}: {col} ours {ours[col]} but HTA null (no NCCL kernel)"
            continue
        assert ours[col] is not None, f"{key}: {col} null but HTA {hta[col]}"
        assert abs(ours[col] - hta[col]) <= tol, f"{key}: {col} ours {ours[col]:.3f} HTA {hta[col]}"


# ---------------------------------------------------------------------------------------------


def test_hta_loading_rules_keep_the_rows_hta_kept(case):
    """Same rows as HTA after its load + last-step filter, per category, and the same GPU rows."""
    ev = case.events
    ts = ev.column("ts_ns").to_numpy(zero_copy_only=False)
    loaded = hta_filter.loaded_mask(ev)
    stream = hta_filter.hta_stream(ev, hta_rule=True)  # HTA's own rule: what its loader kept
    keep = hta_filter.last_step_keep_mask(ev, loaded, stream, hta_filter.hta_correlation(ev), ts)
    cats = np.array(ev.column("raw_category").to_pylist(), dtype=object)
    assert dict(collections.Counter(cats[keep])) == case.golden["hta_df_rows_by_cat"]
    assert dict(collections.Counter(cats[keep & (stream != -1)])) == case.golden["hta_gpu_rows_by_cat"]


def test_rank_breakdown_matches_hta_with_hta_rounding(case):
    """With HTA's µs rounding reproduced, idle/compute/non-compute/overlap % are within 0.5 pp.

    In fact they agree to HTA's 2 decimals, and the times to the µs: checked too, so that any
    drift in our loading rules or parser shows up here.
    """
    ours, _ = case.analyze(rounding=True)
    hta = _hta(case.key)
    _assert_pcts_close(ours, hta, PCT_TOLERANCE, case.key)
    _assert_pcts_close(ours, hta, 0.005 + 1e-6, case.key)  # HTA rounds % to 2 decimals
    assert ours["n_kernels"] == hta["n_gpu_rows"]
    tb = case.golden["temporal_breakdown"]
    for col, hcol in (
        ("kernel_time_ns", "kernel_time(us)"),
        ("idle_time_ns", "idle_time(us)"),
        ("compute_time_ns", "compute_time(us)"),
        ("non_compute_time_ns", "non_compute_time(us)"),
    ):
        assert ours[col] == round(tb[hcol] * 1000), f"{case.key}: {col} {ours[col]} vs HTA {tb[hcol]} µs"


def test_rank_breakdown_exact_ns(case):
    """Default mode (exact ns, what the ``ranks`` table stores).

    Whole-µs traces: HTA does not round, so we agree within 0.5 pp. Sub-µs traces: a deliberate
    difference. HTA shortens every GPU event by up to 1 µs at each end, so each merged time (busy,
    compute) moves by at most 2 µs per event: |ours − HTA| ≤ 100 × 2 µs × n_kernels / kernel_time
    pp, and kernel_time itself by < 2 µs. Our value is the unrounded one.
    """
    ours, _ = case.analyze(rounding=False)
    hta = _hta(case.key)
    host = case.golden["hta_gpu_rows_by_cat"].get("cpu_op", 0)  # host rows HTA counts as GPU work
    assert ours["n_kernels"] == hta["n_gpu_rows"] - host
    if host:  # a deliberate departure (issue 33): those rows are host work; the span can only shrink
        assert ours["kernel_time_ns"] <= hta["kernel_time_us"] * 1000 + 2000
        return
    if not case.sub_us:
        _assert_pcts_close(ours, hta, PCT_TOLERANCE, case.key)
        assert abs(ours["kernel_time_ns"] - hta["kernel_time_us"] * 1000) < 1000
        return
    assert abs(ours["kernel_time_ns"] - hta["kernel_time_us"] * 1000) < 2000
    bound = 100 * 2000 * ours["n_kernels"] / ours["kernel_time_ns"] + 0.01
    _assert_pcts_close(ours, hta, max(PCT_TOLERANCE, bound), case.key)


def test_exact_ns_differs_from_hta_on_triton_example():
    """triton_example: HTA reports kernel_time 94 µs; ours is the exact span of its device rows.

    HTA's GPU rows here are the Triton kernel (1.76 µs) and a cpu_op that carries ``args.stream = 0`` (the
    Triton launcher on the host: HTA counts it as GPU work; we read the category, issue 33). Expected value
    computed from the raw JSON with exact decimals, independently of our code.
    """
    key = "torch/HolisticTraceAnalysis/triton_example/triton_example.json.gz"
    doc = json.loads(_raw(key), parse_float=Decimal)
    gpu = [
        e
        for e in doc["traceEvents"]
        if e.get("dur") is not None
        and e.get("cat") not in (None, "Trace")
        and isinstance((e.get("args") or {}).get("stream"), int)
    ]
    assert sorted(e["cat"] for e in gpu) == ["cpu_op", "kernel"]
    gpu = [e for e in gpu if e["cat"] == "kernel"]  # the device row; the cpu_op is host work
    span_ns = int((max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) * 1000)
    ours, _ = Case(key).analyze(rounding=False)
    assert ours["kernel_time_ns"] == span_ns
    assert _hta(key)["kernel_time_us"] == 94.0 and span_ns != 94_000
    assert ours["compute_pct"] == pytest.approx(100.0)  # HTA: 100 (both rows are COMPUTATION)


def test_steps_rows_are_consistent_with_the_rank(case):
    """Per-step rows: one per CPU ProfilerStep#N (kept by HTA's filter or not); percentages add
    up; host busy time fits in the step."""
    ours, steps = case.analyze(rounding=False)
    assert ours["n_steps"] == len(steps)
    assert set(case.golden["hta_iterations"]) <= {s["step"] for s in steps}
    for s in steps:
        assert s["step_time_ns"] > 0 and 0 <= s["cpu_op_time_ns"] <= s["step_time_ns"]
        if s["n_kernels"] and s["kernel_time_ns"]:
            assert s["idle_pct"] + s["compute_pct"] + s["non_compute_pct"] == pytest.approx(100)


def test_no_gpu_events_gives_null_breakdown_where_hta_raises(no_gpu_case):
    """HTA raises IndexError (empty kernel set); we return a ranks row with a null breakdown."""
    ours, steps = no_gpu_case.analyze(rounding=False)
    g = no_gpu_case.golden
    assert g["hta_gpu_rows"] == 0
    assert ours["n_kernels"] == 0
    for col in ("kernel_time_ns", "idle_pct", "compute_pct", "non_compute_pct", "overlap_pct", "comm_time_ns"):
        assert ours[col] is None
    # The CPU steps are still there (HTA: get_iterations). (cpu_only: its 4 cpu_ops start after
    # ProfilerStep#551 ends, so the step has 0 host busy time.)
    assert [s["step"] for s in steps] == g["hta_iterations"]
    assert ours["n_steps"] == len(g["hta_iterations"])
    assert all(s["n_kernels"] == 0 and 0 <= s["cpu_op_time_ns"] <= s["step_time_ns"] for s in steps)


def test_bare_list_trace_that_hta_cannot_load(load_failed_case):
    """2021-01 legacy trace: a bare JSON list. HTA fails to load it (``'list' object has no
    attribute 'items'``); we analyze it. Checked: a complete breakdown, its six ProfilerSteps
    (#5..#10, legacy ``Operator`` category), and that the last-step filter dropped step 10's kernels.
    """
    ours, steps = load_failed_case.analyze(rounding=False)
    assert [s["step"] for s in steps] == [5, 6, 7, 8, 9, 10]
    assert ours["n_steps"] == 6
    assert ours["kernel_time_ns"] > 0
    assert ours["idle_pct"] + ours["compute_pct"] + ours["non_compute_pct"] == pytest.approx(100)
    assert ours["overlap_pct"] is None  # single GPU, no NCCL kernel
    ev = load_failed_case.events
    all_gpu = int((hta_filter.loaded_mask(ev) & (hta_filter.hta_stream(ev) != -1)).sum())
    last = steps[-1]["n_kernels"]
    assert last > 0 and ours["n_kernels"] <= all_gpu - last
    assert ours["n_kernels"] >= sum(s["n_kernels"] for s in steps[:-1])
