"""parse_kineto on real corpus traces (every format generation) and hand-made edge cases.

Expected values are computed independently from the JSON with the stdlib ``json`` module
(``parse_float=Decimal`` for exact µs), or were read off the files by hand (quoted in comments).
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from jobs.landing.formats import rank_from_filename
from jobs.normalize.kineto.parse import EVENT_COLUMNS, ParsedTrace, TraceError, parse_kineto
from schemas.tables import EVENTS

TORCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "torch"
ALL_TRACES = sorted(p.relative_to(TORCH).as_posix() for p in TORCH.rglob("*.json*")) if TORCH.is_dir() else []


# --------------------------------------------------------------------------- helpers (independent)


def load_json(path: Path):
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)


def events_of(doc):
    return doc if isinstance(doc, list) else doc["traceEvents"]


def exact_ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def parse_file(corpus: Path, rel: str) -> tuple[ParsedTrace, dict]:
    path = corpus / "torch" / rel
    p = parse_kineto(path.read_bytes(), str(path))
    return p, p.events.to_pydict()


def row_of(cols: dict, event_id: int) -> dict:
    i = cols["event_id"].index(event_id)
    return {k: v[i] for k, v in cols.items()}


def tiny(events, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **top}).encode()


_ALIASES = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "gpu_user_Annotation": "gpu_user_annotation",
}
_GPU = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "mtia_ccp_events", "hpu_op"}


def _key(v, stream=False):
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    m = re.match(r"^\s*stream\s+(-?\d+)\s*$", v) if stream and isinstance(v, str) else None
    return int(m.group(1)) if m else ("s", str(v))


def reference_rows(doc) -> dict:
    """Obviously-correct (slow) reimplementation of the documented rules, for cross-checks:
    stack nesting per (pid, tid), flow binding by scanning, step by containment/correlation."""
    ev = events_of(doc)
    base = 0 if isinstance(doc, list) else int(doc.get("baseTimeNanoseconds") or 0)
    rows = {}
    for i, e in enumerate(ev):
        if e.get("ph") in ("X", "i", "C"):
            ts = base + exact_ns(e["ts"])
            dur = exact_ns(e["dur"]) if e["ph"] == "X" and e.get("dur") is not None else None
            cat = _ALIASES.get(e.get("cat"), e.get("cat"))
            corr = (e.get("args") or {}).get("correlation")
            rows[i] = dict(
                ts_ns=ts,
                dur_ns=dur,
                end=ts + max(dur or 0, 0),
                ph=e["ph"],
                name=e.get("name"),
                track=(_key(e.get("pid")), _key(e.get("tid"), True)),
                is_gpu=cat in _GPU,
                category=cat,
                correlation=corr if isinstance(corr, int) else None,
                parent=None,
                depth=0,
                step=None,
                flow_id=None,
                fwdbwd_flow_id=None,
            )
    tracks: dict = {}
    for i, r in rows.items():
        if r["ph"] == "X":
            tracks.setdefault(r["track"], []).append(i)
    for ids in tracks.values():
        ids.sort(key=lambda i: (rows[i]["ts_ns"], -rows[i]["end"], i))
        stack: list = []
        for i in ids:
            while stack and rows[stack[-1]]["end"] < rows[i]["end"]:
                stack.pop()
            rows[i]["parent"] = stack[-1] if stack else None
            rows[i]["depth"] = len(stack)
            stack.append(i)
    starts = {t: [rows[i]["ts_ns"] for i in ids] for t, ids in tracks.items()}

    def enclosing(track, ts):
        ids = tracks.get(track, [])
        k = bisect.bisect_right(starts[track], ts) - 1 if ids else -1
        while k >= 0 and rows[ids[k]]["end"] < ts:
            k -= 1
        return ids[k] if k >= 0 else None

    for r in rows.values():
        if r["ph"] != "X":
            p = enclosing(r["track"], r["ts_ns"])
            r["parent"], r["depth"] = p, (rows[p]["depth"] + 1 if p is not None else 0)
    for e in ev:
        if e.get("ph") not in ("s", "f"):
            continue
        c = e.get("cat")
        kind = (
            "flow_id"
            if c in ("ac2g", "async_cpu_to_gpu") or (c == "async" and e.get("name") == "launch")
            else "fwdbwd_flow_id"
            if c in ("fwdbwd", "forward_backward")
            else None
        )
        if kind is None:
            continue
        track, ts = (_key(e.get("pid")), _key(e.get("tid"), True)), base + exact_ns(e["ts"])
        if e["ph"] == "s" or e.get("bp") == "e":
            tgt = enclosing(track, ts)
        else:
            ids = tracks.get(track, [])
            k = bisect.bisect_left(starts[track], ts) if ids else 0
            tgt = ids[k] if k < len(ids) else None
        if tgt is not None and rows[tgt][kind] is None:
            rows[tgt][kind] = int(e["id"])
    steps = sorted(
        (r["ts_ns"], r["end"], int(r["name"][13:]))
        for r in rows.values()
        if r["ph"] == "X" and not r["is_gpu"] and str(r["name"]).startswith("ProfilerStep#")
    )
    for r in rows.values():
        if not r["is_gpu"]:
            k = bisect.bisect_right([s[0] for s in steps], r["ts_ns"]) - 1
            if k >= 0 and r["ts_ns"] <= steps[k][1]:
                r["step"] = steps[k][2]
    corr_step: dict = {}
    for i in sorted(rows):
        r = rows[i]
        if not r["is_gpu"] and r["correlation"] is not None and r["step"] is not None:
            corr_step.setdefault(r["correlation"], r["step"])
    for r in rows.values():
        if r["is_gpu"] and r["correlation"] is None and r["flow_id"] is not None:
            r["correlation"] = r["flow_id"]
        if r["is_gpu"] and r["correlation"] is not None:
            r["step"] = corr_step.get(r["correlation"])
    return rows


# --------------------------------------------------------------------------- all corpus files


@pytest.mark.parametrize("rel", ALL_TRACES)
def test_every_corpus_trace_parses_one_row_per_x_i_c_event(CORPUS, rel):
    doc = load_json(CORPUS / "torch" / rel)
    ev = events_of(doc)
    expected_ids = [i for i, e in enumerate(ev) if e.get("ph") in ("X", "i", "C")]
    p, cols = parse_file(CORPUS, rel)
    assert p.events.schema.names == list(EVENT_COLUMNS)
    for f in p.events.schema:
        assert f.type == EVENTS.arrow_schema().field(f.name).type, f.name
    assert p.meta["n_events"] == p.events.num_rows == len(expected_ids)
    assert cols["event_id"] == expected_ids
    assert Counter(cols["ph"]) == Counter(ev[i]["ph"] for i in expected_ids)
    assert p.events.column("ts_ns").null_count == 0
    assert p.meta["uncompressed_bytes"] > 0 and p.meta["trace_start_ns"] <= p.meta["trace_end_ns"]


def test_corpus_has_28_traces():
    if not ALL_TRACES:
        pytest.skip("corpus not available")
    assert len(ALL_TRACES) == 28


@pytest.mark.parametrize(
    "rel",
    [
        "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json",  # absolute int µs, ac2g
        "HolisticTraceAnalysis/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # relative + base, fwdbwd
        "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
        "TraceLens/inference/vllm_decode_full/graph_execution.json.gz",
    ],
)
def test_matches_naive_reference_on_small_traces(CORPUS, rel):
    ref = reference_rows(load_json(CORPUS / "torch" / rel))
    _, cols = parse_file(CORPUS, rel)
    for col in (
        "ts_ns",
        "dur_ns",
        "parent",
        "depth",
        "step",
        "flow_id",
        "fwdbwd_flow_id",
        "correlation",
        "category",
        "is_gpu",
    ):
        got = dict(zip(cols["event_id"], cols[col]))
        diff = [(i, got[i], r[col]) for i, r in ref.items() if got[i] != r[col]]
        assert not diff, (col, diff[:5])


# --------------------------------------------------------------------------- one test per format generation


def test_list_2020_legacy_categories_string_tids_and_async_launch_flows(CORPUS):
    rel = "kineto/tb_plugin_2021-01/resnet50_num_workers_0/worker0.pt.trace.json.gz"
    doc = load_json(CORPUS / "torch" / rel)
    assert isinstance(doc, list)
    p, cols = parse_file(CORPUS, rel)
    assert p.meta["format"] == "list-2020"
    assert p.meta["time_base"] == "absolute-us-int" and p.meta["base_time_ns"] == 0
    # event 61639: Kernel on pid 0, tid "stream 7", ts 1606910596927373, args.correlation 104523
    k = row_of(cols, 61639)
    assert doc[61639]["tid"] == "stream 7" and doc[61639]["cat"] == "Kernel"
    assert (k["category"], k["raw_category"], k["is_gpu"]) == ("kernel", "Kernel", True)
    assert (k["tid"], k["stream"], k["device"], k["pid"]) == (7, 7, 0, 0)
    assert k["ts_ns"] == 1606910596927373000 and k["dur_ns"] == 1000
    assert k["correlation"] == 104523 and k["external_id"] == 20485  # legacy lower-case "external id"
    # its launch: event 61641 cudaLaunchKernel (cat Runtime, string tid "4093687616") inside ProfilerStep#7
    launch = row_of(cols, 61641)
    assert (launch["name"], launch["category"], launch["correlation"]) == ("cudaLaunchKernel", "cuda_runtime", 104523)
    assert launch["tid"] == 4093687616 and launch["flow_id"] == 104523  # cat "async" name "launch" flow bound
    assert launch["step"] == 7 and k["step"] == 7
    assert k["flow_id"] == 104523
    assert p.meta["n_profiler_steps"] == 6


def test_object_legacy_categories_2021_06(CORPUS):
    rel = "kineto/tb_plugin_2021-06/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    p, cols = parse_file(CORPUS, rel)
    assert p.meta["format"] == "object-legacy-categories"
    assert p.meta["device_name"] == "Tesla V100-DGXS-32GB"
    assert p.meta["rank"] is None and p.meta["n_profiler_steps"] == 6
    # kernel 56100 (ts 1623142624061552, "stream 7") launched by cudaLaunchKernel 56102 in ProfilerStep#8
    k, launch = row_of(cols, 56100), row_of(cols, 56102)
    assert k["ts_ns"] == 1623142624061552000 and k["stream"] == 7
    assert k["correlation"] == launch["correlation"] == 68848
    assert launch["step"] == 8 and k["step"] == 8
    assert set(cols["category"]) >= {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy"}
    assert not {"Operator", "Runtime", "Kernel"} & set(cols["category"])


def test_async_cpu_to_gpu_flows_2022(CORPUS):
    rel = "HolisticTraceAnalysis/trace_diff/control/control.json.gz"
    doc = load_json(CORPUS / "torch" / rel)
    ev = events_of(doc)
    p, cols = parse_file(CORPUS, rel)
    assert p.meta["rank"] == 3 and p.meta["world_size"] == 8 and p.meta["distributed_backend"] == "nccl"
    # every `f` (bp "e") of an async_cpu_to_gpu flow on a device row (pid = device index) sits at the start of a
    # kernel/memcpy with the same correlation; the `s` end binds the launching cuda_runtime call
    fl = [e for e in ev if e.get("ph") == "f" and e.get("cat") == "async_cpu_to_gpu" and e["pid"] < 64][:200]
    assert len(fl) == 200
    by_flow = {}
    for i, fid in enumerate(cols["flow_id"]):
        if fid is not None and cols["is_gpu"][i]:
            by_flow.setdefault(fid, []).append(i)
    for e in fl:
        hits = by_flow.get(e["id"], [])
        assert hits, e
        assert any(cols["ts_ns"][i] == exact_ns(e["ts"]) and cols["correlation"][i] == e["id"] for i in hits)
    launches = {e["id"]: exact_ns(e["ts"]) for e in ev if e.get("ph") == "s" and e.get("cat") == "async_cpu_to_gpu"}
    rt = [i for i, c in enumerate(cols["category"]) if c == "cuda_runtime" and cols["flow_id"][i] in launches]
    assert len(rt) >= 0.99 * len(launches)
    assert all(cols["ts_ns"][i] <= launches[cols["flow_id"][i]] for i in rt)


def test_absolute_float_microseconds_are_exact_ns(CORPUS):
    rel = "HolisticTraceAnalysis/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = load_json(CORPUS / "torch" / rel)
    p, cols = parse_file(CORPUS, rel)
    assert p.meta["time_base"] == "absolute-us-float"
    # event 47034: kernel "ts": 1712195495740538.694, "dur": 52.000 (float64 cannot hold this at ns precision)
    assert str(events_of(doc)[47034]["ts"]) == "1712195495740538.694"
    k = row_of(cols, 47034)
    assert k["ts_ns"] == 1712195495740538694 and k["dur_ns"] == 52000
    assert float(Decimal("1712195495740538.694")) * 1000 != 1712195495740538694
    ev = events_of(doc)
    for eid, ts in list(zip(cols["event_id"], cols["ts_ns"]))[::997]:
        assert ts == exact_ns(ev[eid]["ts"])
    assert row_of(cols, 47036)["step"] == 103 and k["step"] == 103  # launch inside ProfilerStep#103


def test_relative_ts_plus_base_time_and_collective_args(CORPUS):
    rel = "HolisticTraceAnalysis/nccl_parser_config/nccl_data.json.gz"
    doc = load_json(CORPUS / "torch" / rel)
    p, cols = parse_file(CORPUS, rel)
    assert p.meta["time_base"] == "relative+baseTimeNanoseconds"
    assert p.meta["base_time_ns"] == doc["baseTimeNanoseconds"] == 1711964646000000000
    # kernel 27102 "ts": 4458676604328.785 -> base + 4458676604328785 ns; launched in ProfilerStep#4
    k = row_of(cols, 27102)
    assert k["ts_ns"] == 1711964646000000000 + 4458676604328785
    assert k["step"] == 4 and row_of(cols, 27104)["step"] == 4 and k["correlation"] == 33712
    c = row_of(cols, 16818)  # ncclKernel_AllReduce...: allreduce 6637568 Float elements, PG "0", 2 ranks
    assert (c["collective"], c["pg_name"], c["group_size"], c["msg_bytes"]) == ("allreduce", "0", 2, 6637568 * 4)
    assert json.loads(c["args_json"], parse_float=Decimal) == events_of(doc)[16818]["args"]
    assert p.meta["n_profiler_steps"] == 3
    assert p.meta["distributed_backend"] == "nccl" and p.meta["world_size"] == 2 and p.meta["rank"] == 0


def test_newest_format_allgather_collective(CORPUS):
    rel = "TraceLens/b200/eager_trace.json.gz"
    p, cols = parse_file(CORPUS, rel)
    c = row_of(cols, 22345)  # ncclDevKernel_AllGather_RING_LL: _allgather_base, in 25136 / out 201088 BFloat16
    assert c["collective"] == "_allgather_base" and c["pg_name"] == "3" and c["group_size"] == 8
    assert c["msg_bytes"] == 201088 * 2
    assert "no_profiler_step" in p.meta["flags"]
    assert p.meta["device_name"].startswith("NVIDIA B200")


def test_nccl_kernels_without_args_get_collective_from_name(CORPUS):
    rel = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"
    ev = events_of(load_json(CORPUS / "torch" / rel))
    _, cols = parse_file(CORPUS, rel)
    got = dict(zip(cols["event_id"], cols["collective"]))
    n_ar = n_sr = 0
    for i, e in enumerate(ev):
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_AllReduce"):
            assert got[i] == "allreduce"
            n_ar += 1
        elif e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_SendRecv"):
            assert got[i] == "sendrecv"
            n_sr += 1
        elif i in got and e.get("cat") == "kernel":
            assert got[i] is None
    assert n_ar > 0 and n_sr > 0


def test_fwdbwd_flows_bind_forward_and_backward_ops(CORPUS):
    rel = "TraceLens/mi300/resnet_act_checkpoint.json.gz"
    ev = events_of(load_json(CORPUS / "torch" / rel))
    _, cols = parse_file(CORPUS, rel)
    ids = {e["id"] for e in ev if e.get("cat") == "fwdbwd"}
    got = Counter(v for v in cols["fwdbwd_flow_id"] if v is not None)
    assert ids and set(got) <= ids
    # each fwdbwd id binds its forward op (s) and its backward op (f): two rows per id
    assert sum(1 for v in got.values() if v == 2) >= 0.9 * len(ids)


def test_df_index_resolver_memory_instants_and_steps(CORPUS):
    rel = "HolisticTraceAnalysis/df_index_resolver/df_index_resolver.json.gz"
    p, cols = parse_file(CORPUS, rel)
    assert Counter(cols["ph"]) == {"X": 123379, "i": 28012}
    assert p.meta["n_profiler_steps"] == 5 and p.meta["rank"] == 1 and p.meta["device_name"].startswith("Tesla V100")
    kernels = [i for i, c in enumerate(cols["category"]) if c == "kernel"]
    with_step = sum(1 for i in kernels if cols["step"][i] is not None)
    assert with_step / len(kernels) > 0.95


# --------------------------------------------------------------------------- hand-made edge cases


def _x(name, ts, dur, pid=1, tid=1, **kw):
    return {"ph": "X", "cat": kw.pop("cat", "cpu_op"), "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, **kw}


def test_exponent_notation_and_16_digit_float_exactness():
    raw = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
        b'"ts": 1713832237123456.789, "dur": 1.5e3},'
        b'{"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1.713832237123457E15, "dur": 2E-3},'
        b'{"ph": "i", "name": "c", "pid": 1, "tid": 1, "ts": 17138322371234567e-1, "s": "t"}]}'
    )
    cols = parse_kineto(raw, "x.json").events.to_pydict()
    assert cols["ts_ns"] == [1713832237123456789, 1713832237123457000, 1713832237123456700]
    assert cols["dur_ns"] == [1500000, 2, None]
    # b starts 211 ns after a (which lasts 1.5 ms) -> nested; c is 89 ns before a starts -> top level
    assert cols["parent"] == [None, 0, None] and cols["depth"] == [0, 1, 0]


def test_relative_float_ts_with_base_time_exact():
    raw = tiny([_x("a", 12.345, 0.001), _x("b", 1099511627775.999, 1)], baseTimeNanoseconds=1700000000000000000)
    p = parse_kineto(raw, "x.json")
    assert p.events.column("ts_ns").to_pylist() == [1700000000000012345, 1700000000000000000 + 1099511627775999]
    assert p.events.column("dur_ns").to_pylist() == [1, 1000]
    assert p.meta["time_base"] == "relative+baseTimeNanoseconds"


def test_bare_list_and_string_tids():
    raw = json.dumps(
        [
            {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 9, "tid": "140", "ts": 100, "dur": 50},
            {
                "ph": "X",
                "cat": "Runtime",
                "name": "cudaLaunchKernel",
                "pid": 9,
                "tid": "140",
                "ts": 110,
                "dur": 5,
                "args": {"correlation": 77, "external id": 5},
            },
            {"ph": "s", "id": 77, "pid": 9, "tid": 140, "ts": 110, "cat": "async", "name": "launch"},
            {
                "ph": "X",
                "cat": "Kernel",
                "name": "k",
                "pid": 0,
                "tid": "stream 7",
                "ts": 200,
                "dur": 10,
                "args": {"device": 0, "stream": 7},
            },
            {"ph": "f", "id": 77, "pid": 0, "tid": "stream 7", "ts": 200, "cat": "async", "name": "launch", "bp": "e"},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": "stream 7", "args": {"name": "stream 7"}},
            {"ph": "M", "name": "process_name", "pid": 9, "tid": 0, "args": {"name": "python"}},
        ]
    ).encode()
    p = parse_kineto(raw, "worker0.pt.trace.json")
    c = p.events.to_pydict()
    assert p.meta["format"] == "list-2020" and c["event_id"] == [0, 1, 3]
    assert c["category"] == ["cpu_op", "cuda_runtime", "kernel"]
    assert c["tid"] == [140, 140, 7] and c["stream"] == [None, None, 7] and c["device"] == [None, None, 0]
    assert c["flow_id"] == [None, 77, 77]
    assert c["correlation"] == [None, 77, 77]  # the kernel's correlation comes from the launch flow
    assert c["external_id"] == [None, 5, None]
    assert c["step"] == [3, 3, 3]
    assert c["parent"] == [None, 0, None]
    assert c["process_name"] == ["python", "python", None] and c["thread_name"] == [None, None, "stream 7"]
    assert p.meta["n_profiler_steps"] == 1


def test_nesting_ties_and_partial_overlap_are_deterministic():
    ev = [
        _x("outer", 0, 100),
        _x("same_end_child", 50, 50),  # ends exactly at the parent's end -> nested
        _x("twin_a", 10, 10),
        _x("twin_b", 10, 10),  # identical intervals: the earlier one is the parent
        _x("partial", 90, 20),  # overlaps outer's end -> not enclosed by outer
        _x("other_track", 10, 5, tid=2),
    ]
    c = parse_kineto(tiny(ev), "x.json").events.to_pydict()
    assert c["parent"] == [None, 0, 0, 2, None, None]
    assert c["depth"] == [0, 1, 1, 2, 0, 0]


def test_fwdbwd_binding_s_enclosing_and_f_next_slice():
    ev = [
        _x("fwd_outer", 0, 100),
        _x("fwd_inner", 10, 20),
        {"ph": "s", "id": 5, "pid": 1, "tid": 1, "ts": 15, "cat": "fwdbwd", "name": "fwdbwd"},
        {"ph": "f", "id": 5, "pid": 1, "tid": 2, "ts": 300, "cat": "fwdbwd", "name": "fwdbwd"},
        _x("bwd_before", 290, 5, tid=2),
        _x("bwd", 305, 10, tid=2),
        {"ph": "s", "id": 6, "pid": 1, "tid": 1, "ts": 500, "cat": "fwdbwd", "name": "fwdbwd"},  # no slice: unbound
    ]
    c = parse_kineto(tiny(ev), "x.json").events.to_pydict()
    assert dict(zip(c["name"], c["fwdbwd_flow_id"])) == {
        "fwd_outer": None,
        "fwd_inner": 5,
        "bwd_before": None,
        "bwd": 5,
    }


def test_counter_and_instant_events_are_rows_and_negative_duration_is_flagged():
    ev = [
        _x("neg", 10, -3),
        {"ph": "C", "name": "Queue", "pid": 0, "tid": 0, "ts": 5, "args": {"len": 3}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 9, "s": "t"},
    ]
    p = parse_kineto(tiny(ev), "x.json")
    c = p.events.to_pydict()
    assert c["ph"] == ["X", "C", "i"] and c["dur_ns"] == [None, None, None]  # dur < 0 is invalid: null (B06)
    assert c["args_json"] == [None, '{"len":3}', None]
    assert "negative_duration" in p.meta["flags"] and "no_profiler_step" in p.meta["flags"]


def test_args_json_is_compact_and_faithful():
    raw = (
        b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1,\n'
        b'  "args": {\n    "External id": 7, "Call stack": "a.py(1): f; b.py(2): g",\n'
        b'    "Input Dims": [[1, 2], []], "big": 123456789012345678901234567890, "u": "\\u00e9 \xc3\xa9"\n  }}]}'
    )
    c = parse_kineto(raw, "x.json").events.to_pydict()
    assert c["args_json"][0] == (
        '{"External id":7,"Call stack":"a.py(1): f; b.py(2): g","Input Dims":[[1,2],[]],'
        '"big":123456789012345678901234567890,"u":"\\u00e9 \u00e9"}'
    )
    assert c["external_id"] == [7]
    verbatim = parse_kineto(raw, "x.json", compact_args=False).events.column("args_json")[0].as_py()
    assert json.loads(verbatim) == json.loads(c["args_json"][0])


def test_nonfinite_numbers_and_control_characters_are_repaired_and_flagged():
    raw = (
        b'{"traceEvents": [{"ph": "X", "name": "a\tb", "pid": 1, "tid": 1, "ts": 1, "dur": 2,'
        b' "args": {"bw": NaN, "x": -Infinity, "y": inf, "s": "NaN inside a string"}}]}'
    )
    p = parse_kineto(raw, "x.json")
    c = p.events.to_pydict()
    assert c["name"] == ["a\tb"]
    assert json.loads(c["args_json"][0]) == {"bw": None, "x": None, "y": None, "s": "NaN inside a string"}
    assert {"nonfinite_number", "control_characters"} <= set(p.meta["flags"])


def test_gzip_bytes_named_json_and_multi_member_gzip():
    doc = tiny([_x("a", 1, 2), _x("b", 2, 1)])
    p = parse_kineto(gzip.compress(doc[:20]) + gzip.compress(doc[20:]), "trace.json")
    assert p.meta["container"] == "gzip" and p.meta["uncompressed_bytes"] == len(doc)
    assert p.events.column("name").to_pylist() == ["a", "b"]
    assert parse_kineto(doc, "trace.json.gz").meta["container"] == "json"


def test_distributed_info_and_device_properties_meta():
    raw = tiny(
        [_x("ProfilerStep#12", 0, 10, cat="user_annotation")],
        distributedInfo={"backend": "nccl", "rank": "5", "world_size": 8},
        deviceProperties=[{"id": 0, "name": "NVIDIA H100"}],
        host_name="node-1",
    )
    m = parse_kineto(raw, "x.json").meta
    assert (m["rank"], m["world_size"], m["distributed_backend"]) == (5, 8, "nccl")
    assert (m["device_name"], m["host_name"], m["n_profiler_steps"]) == ("NVIDIA H100", "node-1", 1)
    assert m["flags"] == [] and m["trace_start_ns"] == 0 and m["trace_end_ns"] == 10000


def test_empty_event_list_is_a_valid_empty_trace():
    p = parse_kineto(tiny([]), "x.json")
    assert p.events.num_rows == 0 and p.events.schema.names == list(EVENT_COLUMNS)


# --------------------------------------------------------------------------- quarantine reasons


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b'{"traceEvents": [{"ph": "X",, "ts": 1}]}', r"not valid JSON at byte 28"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "truncated JSON"),
        (
            gzip.compress(tiny([{"ph": "X", "name": f"op{i}", "ts": i, "dur": i % 7} for i in range(3000)]))[:3000],
            "truncated gzip stream",
        ),
        (b'{"a": 1}', "not a Chrome trace: top-level object has no traceEvents"),
        (b"[1, 2, 3]", "not a Chrome trace"),
        (b'"just a string"', "not a Chrome trace"),
        (b'{"traceEvents": {"ph": "X"}}', "not a Chrome trace"),
        (b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1}]}', "has no valid numeric ts"),
    ],
)
def test_quarantine_reasons(data, reason):
    with pytest.raises(TraceError, match=reason):
        parse_kineto(data, "bad.json")


def test_decompressed_size_limit_is_a_quarantine_reason():
    with pytest.raises(TraceError, match="decompressed size exceeds limit"):
        parse_kineto(gzip.compress(tiny([_x("a", 1, 1)] * 100)), "x.json.gz", max_uncompressed_bytes=1000)


def test_trace_error_is_a_value_error_with_reason():
    with pytest.raises(ValueError) as ei:
        parse_kineto(b"{", "x.json")
    assert ei.value.reason == str(ei.value)


@pytest.mark.parametrize(
    "name, rank",
    [
        ("rank-3.Apr_03.pt.trace.json.gz", 3),
        ("rank3.json", 3),
        ("trace_rank_12.json", 12),
        ("worker7.pt.trace.json", 7),
        ("s3://b/job/worker0_step_12.1694128201545.pt.trace.json", 0),
        ("RANK-2.json", 2),
        ("trace.json", None),
        ("frankly.json", None),
        ("host_123.pt.trace.json", None),
    ],
)
def test_rank_from_filename(name, rank):
    assert rank_from_filename(name) == rank


# --------------------------------------------------------------------------- chunked (streaming) decoding


def _both_paths(monkeypatch, data: bytes, chunk_bytes: int = 512):
    """Parse with tiny chunks and with the whole-document path; return both results."""
    import jobs.normalize.kineto.parse as kineto

    calls = []

    class Counting(kineto.EventColumns):
        def add(self, E, raw_text):
            calls.append(len(E))
            return super().add(E, raw_text)

    monkeypatch.setattr(kineto, "EventColumns", Counting)
    monkeypatch.setattr(kineto, "_CHUNK_BYTES", chunk_bytes)
    chunked = parse_kineto(data, "x.json", engine="python")
    assert len(calls) > 1, "the chunked path was not taken"
    monkeypatch.setattr(kineto, "_STREAMING", False)
    whole = parse_kineto(data, "x.json", engine="python")
    monkeypatch.setattr(kineto, "_STREAMING", True)
    return chunked, whole


@pytest.mark.parametrize(
    "rel",
    [
        "param/dlrm_kineto/worker1_step_12.1694128201556.pt.trace.json",
        "HolisticTraceAnalysis/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "kineto/tb_plugin_2021-01/resnet50_num_workers_0/worker0.pt.trace.json.gz",
    ],
)
def test_chunked_decoding_equals_whole_document_decoding(CORPUS, monkeypatch, rel):
    data = (CORPUS / "torch" / rel).read_bytes()
    chunked, whole = _both_paths(monkeypatch, data, chunk_bytes=16 << 10)
    assert chunked.events.equals(whole.events)
    assert chunked.meta == whole.meta


def test_chunk_boundaries_inside_args_strings_and_trailer_are_handled(monkeypatch):
    ev = []
    for i in range(60):
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "op},{" + str(i),
                "pid": 1,
                "tid": 1,
                "ts": 10 * i,
                "dur": 5,
                "args": {"shapes": [{"a": i}, {"b": [i, {"c": "}, {"}]}], "External id": i},
            }
        )
        ev.append({"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 10 * i + 1, "s": "t", "args": {"Bytes": i}})
    trailer = {
        "distributedInfo": {
            "backend": "nccl",
            "rank": 2,
            "world_size": 4,
            "pg_config": [{"pg_name": "0", "ranks": [0, 1]}],
        },
        "traceName": "t}]",
    }
    for text in (
        json.dumps({"schemaVersion": 1, "traceEvents": ev, **trailer}, indent=1).encode(),
        json.dumps({"schemaVersion": 1, "traceEvents": ev, **trailer}, separators=(",", ":")).encode(),
        json.dumps(ev).encode(),
    ):
        chunked, whole = _both_paths(monkeypatch, gzip.compress(text), chunk_bytes=300)
        assert chunked.events.equals(whole.events)
        assert chunked.meta == whole.meta
        c = chunked.events.to_pydict()
        assert c["event_id"] == list(range(120)) and c["external_id"][::2] == list(range(60))
        assert c["name"][2] == "op},{1" and json.loads(c["args_json"][0])["shapes"][1] == {"b": [0, {"c": "}, {"}]}
    assert chunked.meta["rank"] is None and whole.meta["format"] == "list-2020"


def test_single_event_larger_than_a_chunk(monkeypatch):
    big = "x" * 5000
    ev = [_x("a", 1, 1, args={"Call stack": big}), _x("b", 3, 1), _x("c", 5, 1, args={"Call stack": big})]
    chunked, whole = _both_paths(monkeypatch, tiny(ev), chunk_bytes=256)
    assert chunked.events.equals(whole.events) and chunked.events.num_rows == 3


def test_invalid_json_late_in_a_chunked_document_names_the_byte(monkeypatch):
    import jobs.normalize.kineto.parse as kineto

    good = json.dumps({"traceEvents": [_x(f"op{i}", i, 1) for i in range(200)]}).encode()
    pos = good.index(b'"op150"')
    bad = good[:pos] + b"@" + good[pos + 1 :]
    monkeypatch.setattr(kineto, "_CHUNK_BYTES", 512)
    with pytest.raises(TraceError, match=f"not valid JSON at byte {pos}"):
        parse_kineto(gzip.compress(bad), "x.json.gz")


def test_float_paths_are_exact_at_the_fast_path_limit_and_near_ties():
    # 2**42 µs is the fast float path's limit; sub-ns digits at a tie are decided from the text (half to even)
    raw = (
        b'{"traceEvents": ['
        b'{"ph": "i", "name": "a", "pid": 1, "tid": 1, "ts": 4398046511103.999},'
        b'{"ph": "i", "name": "b", "pid": 1, "tid": 1, "ts": 4398046511104.001},'
        b'{"ph": "i", "name": "c", "pid": 1, "tid": 1, "ts": 0.0025},'
        b'{"ph": "i", "name": "d", "pid": 1, "tid": 1, "ts": 0.0035},'
        b'{"ph": "i", "name": "e", "pid": 1, "tid": 1, "ts": -1.5}]}'
    )
    ts = parse_kineto(raw, "x.json").events.column("ts_ns").to_pylist()
    assert ts == [4398046511103999, 4398046511104001, 2, 4, -1500]
    assert ts == [exact_ns(Decimal(v)) for v in ("4398046511103.999", "4398046511104.001", "0.0025", "0.0035", "-1.5")]


@pytest.mark.parametrize(
    ("rel", "torch_version", "runtime"),
    [
        ("TraceLens/b200/eager_trace.json.gz", None, "CUDA 12.9"),  # cuda_runtime_version 12090
        ("TraceLens/mi300/resnet_act_checkpoint.json.gz", None, "HIP 6.4.43483"),  # hip_runtime_version 60443483
        # a benchmark harness's metadata.system.torch_env_info.torch_version; Kineto's runtime int 12040
        ("TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "2.6.0+cu124", "CUDA 12.4"),
        ("param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json", None, None),  # a 2023 trace says neither
    ],
)
def test_torch_and_runtime_versions_from_the_trace(CORPUS, rel, torch_version, runtime):
    p, _ = parse_file(CORPUS, rel)
    assert (p.meta["torch_version"], p.meta["runtime_version"]) == (torch_version, runtime)
