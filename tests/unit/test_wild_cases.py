"""Failure modes real exporters produce in the wild (issue 16), one test group per kind of fault.

The fixtures (``tests/fixtures/wild_cases.py``) are built in code from public failure reports; the expected
values follow from how each fixture is built (its docstring). Parsing runs on both engines — the C scanner
and the pure-Python reference — which must give equal tables (:func:`parse_both`); the per-rank analysis is
the function the pipeline's workers call (:func:`jobs.analyze.hta.breakdown.analyze_rank`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from kineto_engines import parse_both

from jobs.analyze.hta.breakdown import analyze_rank
from jobs.landing.discover import CaptureFile
from jobs.normalize.job import normalize_file
from jobs.normalize.kineto import native
from jobs.normalize.kineto.parse import parse_kineto

_spec = importlib.util.spec_from_file_location(
    "wild_cases", Path(__file__).resolve().parents[1] / "fixtures" / "wild_cases.py"
)
wc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wc)

US = 1000
T = wc.EPOCH_US * US


def by_name(parsed) -> dict:
    d = parsed.events.to_pydict()
    return {d["name"][i]: {k: v[i] for k, v in d.items()} for i in range(parsed.events.num_rows)}


def analyzed(data: bytes, uri: str = "landing/job/trace.json"):
    """(captures row, steps rows by step, ranks row) of one file, as the pipeline's workers compute them."""
    task = CaptureFile(uri=uri, capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    row, ev = normalize_file(task, data)
    assert row["status"] == "ingested", row["reason"]
    steps, ranks = analyze_rank(ev)
    return row, {s["step"]: s for s in steps.to_pylist()}, ranks.to_pylist()[0]


# --------------------------------------------------------------------------- W1 duration events B/E


def test_W1_begin_end_pairs_become_complete_events():
    p = parse_both(wc.w1_begin_end())
    r = by_name(p)
    step = r["ProfilerStep#1"]
    assert step["ph"] == "X" and step["ts_ns"] == T and step["dur_ns"] == 1000 * US and step["event_id"] == 1
    mm = r["aten::mm"]
    assert (mm["ts_ns"], mm["dur_ns"], mm["depth"]) == (T + 100 * US, 300 * US, 1)
    assert mm["parent"] == step["event_id"] and r["cudaLaunchKernel"]["parent"] == mm["event_id"]
    assert r["aten::add"]["dur_ns"] == 100 * US and r["aten::add"]["parent"] == step["event_id"]
    # the E rows are gone; the B never closed stays, without a duration
    assert p.events.num_rows == 6 and None not in r
    assert r["never_closed"]["ph"] == "X" and r["never_closed"]["dur_ns"] is None
    assert {"begin_end_pairs", "unmatched_begin", "unmatched_end"} <= set(p.meta["flags"])
    assert "unsupported_phase" not in p.meta["flags"]
    c = p.meta["flag_counts"]
    assert (c["begin_end_pairs"], c["unmatched_begin"], c["unmatched_end"]) == (2, 1, 1)
    assert p.meta["n_profiler_steps"] == 1
    assert {x["step"] for x in p.events.to_pylist() if x["name"] in ("aten::mm", "gemm_kernel")} == {1}


def test_W1_a_begin_end_profiler_step_gets_its_step_row(engine):
    row, steps, rank = analyzed(wc.w1_begin_end())
    assert "begin_end_pairs" in row["flags"]
    assert list(steps) == [1] and steps[1]["step_time_ns"] == 1000 * US
    assert steps[1]["kernel_time_ns"] == 50 * US and rank["n_steps"] == 1


# --------------------------------------------------------------------------- W2 lexical damage inside strings


@pytest.mark.parametrize("n_filler,gz", [(0, False), (40_000, True)])  # whole document; streamed gzip chunks
def test_W2_damage_inside_strings_is_repaired_every_event_kept(n_filler, gz):
    import gzip

    from jobs.normalize.kineto.native import NativeBail

    data, at = wc.w2_string_damage(n_filler)
    raw = gzip.compress(data) if gz else data
    p = parse_kineto(raw, "x.json", engine="python")
    assert p.events.num_rows == 5 + n_filler
    r = by_name(p)
    assert (
        "gemm\ufffd_kernel" in r and r["gemm\ufffd_kernel"]["correlation"] == 3 and r["gemm\ufffd_kernel"]["step"] == 1
    )
    assert '"C:\\\\Users\\\\q"' in r["aten::load"]["args_json"]  # the backslashes kept as written
    assert "f\ufffd" in r
    c = p.meta["flag_counts"]
    assert (c["invalid_utf8"], c["invalid_escape"], c["lone_surrogate"]) == (1, 2, 1)
    assert p.meta["repair_offsets"] == {
        "invalid_utf8": [at["ff"]],
        "invalid_escape": [at["escape"], at["escape"] + 6],
        "lone_surrogate": [at["surrogate"]],
    }
    assert p.meta["repair_offset"] == min(at.values())
    # the C scanner hands string damage to the reference path: "auto" gives the same table and metadata
    auto = parse_kineto(raw, "x.json", engine="auto")
    assert auto.events.equals(p.events) and auto.meta == p.meta
    if native.AVAILABLE:
        with pytest.raises(NativeBail, match="UTF-8|escape|surrogate"):
            parse_kineto(raw, "x.json", engine="native")


def test_W2_the_capture_names_the_repairs_and_their_offsets():
    """As the pipeline parses (engine ``auto``)."""
    import json

    data, at = wc.w2_string_damage()
    row, steps, _ = analyzed(data)
    assert {"invalid_utf8", "invalid_escape", "lone_surrogate"} <= set(row["flags"])
    assert json.loads(row["repair_offsets_json"])["invalid_utf8"] == [at["ff"]]
    assert steps[1]["kernel_time_ns"] == 30 * US


def test_W2_damage_outside_strings_is_quarantined_with_its_offset():
    data, at = wc.w2_structural_damage()
    task = CaptureFile(uri="landing/job/bad.json", capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    row, ev = normalize_file(task, data)
    assert row["status"] == "quarantined" and ev is None
    assert "landing/job/bad.json" in row["reason"] and f"byte {at}" in row["reason"]


# --------------------------------------------------------------------------- W3 device events without a stream


def test_W3_device_events_without_a_stream_are_device_work(engine):
    from jobs.analyze.hta.kernel_stats import kernel_table

    row, steps, rank = analyzed(wc.w3_xpu_no_stream())
    assert steps[1]["kernel_time_ns"] == 550 * US  # first device start (T+100) to last end (T+650)
    assert steps[1]["compute_time_ns"] == 300 * US and steps[1]["idle_time_ns"] == 200 * US
    assert rank["kernel_time_ns"] == 550 * US
    task = CaptureFile(uri="landing/job/xpu.json", capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    _, ev = normalize_file(task, wc.w3_xpu_no_stream())
    k = {r["name"]: r for r in kernel_table(ev).to_pylist()}
    assert k["gemm_xpu"]["total_ns"] == 200 * US and k["relu_xpu"]["n"] == 1 and k["Memcpy M2D"]["step"] == 1
    assert k["gemm_xpu"]["kernel_type"] == "COMPUTATION" and k["Memcpy M2D"]["kernel_type"] == "MEMORY"


def test_W3_a_trace_with_device_streams_keeps_hta_reading():
    """One device row with a stream: HTA's rule (args.stream only) applies to every row, as on the corpus."""
    import json

    from jobs.analyze.trace.hta_filter import hta_stream

    data = json.loads(wc.w3_xpu_no_stream())
    data["traceEvents"][4]["args"]["stream"] = 7  # gemm_xpu names its stream
    task = CaptureFile(uri="landing/job/xpu.json", capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    _, ev = normalize_file(task, json.dumps(data).encode())
    s = dict(zip(ev.column("name").to_pylist(), hta_stream(ev).tolist()))
    assert s["gemm_xpu"] == 7 and s["relu_xpu"] == -1 and s["Memcpy M2D"] == -1


# --------------------------------------------------------------------------- W4 correlation id 0


def test_W4_correlation_zero_falls_back_to_external_id_then_time():
    p = parse_both(wc.w4_correlation_zero())
    r = by_name(p)
    assert r["gemm"]["correlation"] == 11 and r["relu"]["correlation"] == 14
    nccl = r["ncclDevKernel_AllReduce_Sum"]
    assert nccl["correlation"] == 12 and nccl["step"] == 1  # by its unique External id
    assert r["rccl_reduce"]["correlation"] == 13 and r["rccl_reduce"]["step"] == 1  # by time: its launch's step
    assert r["orphan"]["correlation"] is None  # no launch before it: stays unlinked
    c = p.meta["flag_counts"]
    assert (c["correlation_zero"], c["linked_by_time"], c["unlinked_device_rows"]) == (3, 1, 1)


def test_W4_the_linked_kernels_count_in_their_launch_step(engine):
    row, steps, _ = analyzed(wc.w4_correlation_zero())
    assert {"correlation_zero", "linked_by_time", "unlinked_device_rows"} <= set(row["flags"])
    # step 1: gemm (from T+50), the allreduce and, launched in step 1, rccl_reduce (to T+1140); step 2: relu;
    # the orphan has no launch, so no step
    assert steps[1]["kernel_time_ns"] == (1140 - 50) * US and steps[2]["kernel_time_ns"] == 40 * US


# --------------------------------------------------------------------------- W5 host and device on one (pid, tid)


def test_W5_host_and_device_sharing_a_pid_tid_are_two_tracks():
    p = parse_both(wc.w5_shared_pid_tid())
    r = by_name(p)
    assert "improper_nesting" not in p.meta["flags"]
    assert (r["gemm"]["parent"], r["gemm"]["depth"]) == (None, 0)  # not nested under a host slice
    assert r["cudaLaunchKernel"]["parent"] == r["aten::mm"]["event_id"] and r["aten::mm"]["depth"] == 1
    assert r["gemm"]["step"] == 1 and r["gemm"]["stream"] == 0


def test_W5_the_critical_path_keeps_the_host_ops(engine):
    from jobs.analyze.critical_path.rank import rank_critical_path

    paths = {}
    for shared in (True, False):
        task = CaptureFile(uri="landing/job/t.json", capture_id="cap", job_id="job").to_dict()
        task["tags"] = {}
        row, ev = normalize_file(task, wc.w5_shared_pid_tid(shared))
        seg = rank_critical_path(ev)[0].to_pylist()
        paths[shared] = (sorted({s["name"] for s in seg}), seg[0]["path_length_ns"] if seg else None)
    assert paths[True] == paths[False]  # the same path as with the kernel on a stream of its own
    names, length = paths[True]
    assert "aten::mm" in names and "gemm" in names and length == 600 * US  # aten::mm start (T+100) to gemm end


# --------------------------------------------------------------------------- W6 a kernel past the next on its stream


def test_W6_an_overrunning_kernel_is_clipped_to_the_next_start():
    p = parse_both(wc.w6_kernel_past_the_next())
    r = by_name(p)
    assert (r["bad"]["dur_ns"], r["bad"]["dur_raw_ns"]) == (100 * US, 5000 * US)
    assert r["good"]["dur_raw_ns"] is None and r["other"]["dur_ns"] == 50 * US  # another stream: not compared
    assert p.meta["flag_counts"]["stream_overlap_clipped"] == 1
    assert p.meta["flag_counts"]["stream_overlap_clipped_ns"] == 4900 * US


def test_W6_the_step_holds_its_kernels_and_passes_validation(engine):
    import pandas as pd

    from jobs.validate.suites import validate_frames

    row, steps, rank = analyzed(wc.w6_kernel_past_the_next())
    s = steps[1]
    assert s["kernel_time_ns"] == 200 * US  # T+100 … T+300: bad (clipped), good, other
    assert s["kernel_time_ns"] <= s["step_time_ns"]
    report = validate_frames({"steps": pd.DataFrame([{**s, "job_id": "job"}])}, "analyze", job_ids=["job"])
    assert report.tables["analyze/steps"].status == "passed", report.summary()


def test_W6_the_corpus_b200_trace_is_clipped_and_hta_mode_reads_the_raw_durations(CORPUS):
    """The real B200 trace has kernels that overrun the next on their stream; the expected count and time come
    from the raw JSON (exact decimals; per device and stream, in start order), not from our parser."""
    import gzip
    import json
    from decimal import Decimal

    import numpy as np

    from jobs.analyze.trace.hta_filter import hta_round_us
    from jobs.analyze.trace.model import build_rank_trace

    data = (CORPUS / "torch" / "TraceLens" / "b200" / "eager_trace.json.gz").read_bytes()
    streams: dict = {}
    for e in json.loads(gzip.decompress(data), parse_float=Decimal)["traceEvents"]:
        a = e.get("args") or {}
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "stream" in a:
            streams.setdefault((a.get("device", e.get("pid")), a["stream"]), []).append(
                (int(Decimal(e["ts"]) * 1000), int(Decimal(e["dur"]) * 1000))
            )
    n, removed = 0, 0
    for rows in streams.values():
        rows.sort()
        for (t0, d0), (t1, _) in zip(rows, rows[1:]):
            if t0 + d0 > t1:
                n, removed = n + 1, removed + t0 + d0 - t1
    assert n > 0
    p = parse_kineto(data, "b200.json.gz")
    assert p.meta["flag_counts"]["stream_overlap_clipped"] == n
    assert p.meta["flag_counts"]["stream_overlap_clipped_ns"] == removed
    ev = p.events
    for k, v in (("job_id", "j"), ("date", "d"), ("attempt", 0), ("rank", 0), ("capture_id", "c")):
        ev = ev.append_column(k, pa.array([v] * ev.num_rows))
    raw = ev.column("dur_raw_ns")
    assert raw.null_count == ev.num_rows - n
    # HTA's reading (hta_us_rounding) takes the raw durations, rounded as HTA rounds them
    ts = ev.column("ts_ns").to_numpy(zero_copy_only=False)
    dur = np.where(
        pa.compute.is_valid(raw).to_numpy(zero_copy_only=False),
        raw.fill_null(0).to_numpy(),
        ev.column("dur_ns").fill_null(0).to_numpy(),
    )
    base = p.meta["base_time_ns"] or 0
    assert (build_rank_trace(ev, hta_us_rounding=True, time_base_ns=base).dur == hta_round_us(ts, dur, base)[1]).all()


def test_W5_launch_flows_bind_across_the_shared_pid_tid():
    """ac2g flow points on the shared (0, 0): the "s" on the launch call, the "f" (bp e) on the kernel."""
    import json

    d = json.loads(wc.w5_shared_pid_tid())
    t = wc.EPOCH_US
    d["traceEvents"] += [
        {"ph": "s", "id": 1, "pid": 0, "tid": 0, "ts": t + 150, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 0, "ts": t + 200, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ]
    r = by_name(parse_both(json.dumps(d).encode()))
    assert r["cudaLaunchKernel"]["flow_id"] == 1 and r["gemm"]["flow_id"] == 1
    assert r["aten::mm"]["flow_id"] is None


# --------------------------------------------------------------------------- W7 leftovers


def test_W7_parse_limits_pass_through_normalize_file_and_the_stage(tmp_path):
    from jobs.executor import LocalExecutor
    from jobs.normalize.job import run_normalize
    from jobs.normalize.limits import ParseLimits

    task = CaptureFile(uri="landing/job/deep.json", capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    row, _ = normalize_file(task, wc.w7_deep(40), limits=ParseLimits(max_depth=16))
    assert row["status"] == "quarantined" and "landing/job/deep.json" in row["reason"] and "16" in row["reason"]
    row, _ = normalize_file({**task, "limits": {"max_depth": 16}}, wc.w7_deep(40))  # as a worker gets it
    assert row["status"] == "quarantined"
    assert normalize_file(task, wc.w7_deep(40))[0]["status"] == "ingested"  # the default limit is 256
    with pytest.raises(ValueError):
        ParseLimits(max_depth=2)
    # the stage hands its limits to every worker
    (tmp_path / "raw" / "job").mkdir(parents=True)
    (tmp_path / "raw" / "job" / "deep.json").write_bytes(wc.w7_deep(40))
    (tmp_path / "raw" / "job" / "ok.json").write_bytes(wc.w7_deep(3))
    with LocalExecutor(workers=1) as ex:
        res = run_normalize(ex, str(tmp_path / "raw"), str(tmp_path / "wh"), limits={"max_depth": 16})
    status = {c["uri"].rsplit("/", 1)[1]: c["status"] for c in res.captures}
    assert status == {"deep.json": "quarantined", "ok.json": "ingested"}


def test_W7_merged_rank_files_keep_each_ranks_collective_metadata(engine):
    from jobs.analyze.collectives.calls import comm_calls

    task = CaptureFile(uri="landing/job/merged.json", capture_id="cap", job_id="job").to_dict()
    task["tags"] = {}
    row, ev = normalize_file(task, wc.w7_merged_collectives())
    assert "merged_ranks" in row["flags"]
    calls = sorted(comm_calls(ev).to_pylist(), key=lambda c: c["start_ns"])
    assert [(c["pg_name"], c["msg_bytes"]) for c in calls] == [("pg_r0", 4096), ("pg_r1", 8192)]


def test_W7_a_rebuilt_job_leaves_no_stale_rows(tmp_path):
    """Run 1: job ``j`` with the XPU trace (kernels, captured 2023-11-14). Run 2: the same file now holds a CPU-only
    trace captured 10 days later. Every table keeps only run 2's rows of ``j``: no kernels, no old date."""
    import json

    from jobs.analyze.job import run_analyze
    from jobs.executor import LocalExecutor
    from jobs.normalize.job import run_normalize
    from jobs.warehouse import read_pandas

    trace = tmp_path / "raw" / "j" / "rank0.json"
    trace.parent.mkdir(parents=True)
    wh = str(tmp_path / "wh")
    later = wc.EPOCH_US + 10 * 86_400 * 1_000_000
    cpu_only = wc.doc([wc.step(1, later, 1000), wc.ev("aten::add", later + 10, 100)])
    tables = ("captures", "events", "steps", "ranks", "kernels", "critical_path")
    seen = []
    with LocalExecutor(workers=1) as ex:
        for data in (wc.w3_xpu_no_stream(), cpu_only):
            trace.write_bytes(data)
            res = run_normalize(ex, str(tmp_path / "raw"), wh)
            run_analyze(ex, wh, res.job_ids)
            t = read_pandas(wh, tables)
            seen.append({k: sorted(set(t[k]["date"])) for k in tables if len(t[k])} | {"n_kernels": len(t["kernels"])})
    assert seen[0]["events"] == ["2023-11-14"] and seen[0]["n_kernels"] == 3
    assert seen[1] == {k: ["2023-11-24"] for k in tables if k != "kernels"} | {"n_kernels": 0}
    assert json.loads(read_pandas(wh, ["captures"])["captures"]["flag_counts_json"].iloc[0]) == {}


def test_W7_a_job_without_rows_in_a_table_never_written_leaves_it_unwritten(tmp_path):
    """Replacing a job's rows with none creates no table (its marks would read ``unvalidated``)."""
    from jobs.warehouse import exists, write_table
    from schemas import NEURON_SUMMARY

    write_table(NEURON_SUMMARY.empty(), str(tmp_path), "neuron_summary", ["j"])
    assert not exists(str(tmp_path), "neuron_summary")
