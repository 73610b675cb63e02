"""jobs.publish.compare: metric deltas, kernels/ops added, removed, slower, faster, findings appeared/cleared.

Hand-made events with hand-computed expectations, then the two ranks of HTA's ``trace_filter``
corpus traces as two real jobs, checked against sums computed here directly from their events.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from jobs.publish.compare import compare_jobs, op_summary

US = 1000


_CATEGORY = {
    "kernel": "kernel",
    "op": "cpu_op",
    "runtime": "cuda_runtime",
    "gpu_annotation": "gpu_user_annotation",
    "annotation": "user_annotation",
}


def _events(rows):
    """rows: (rank, step, name, kind, dur_us) with kind kernel / op / runtime / gpu_annotation / annotation."""
    out = []
    for i, (rank, step, name, kind, dur) in enumerate(rows):
        out.append(
            {
                "job_id": "j",
                "attempt": 0,
                "rank": rank,
                "event_id": i,
                "ph": "X",
                "name": name,
                "category": _CATEGORY[kind],
                "is_gpu": kind in ("kernel", "gpu_annotation"),
                "dur_ns": dur * US,
                "step": step,
            }
        )
    return pd.DataFrame(out)


def _steps(ranks, steps, ms, idle=None):
    """Steps of ``ms`` each; with ``idle`` (%), a GPU active span of the whole step, ``idle`` % of it idle and the
    rest compute (what ``run_summary``'s time-weighted GPU idle/compute % read)."""
    ns = int(ms * 1e6)
    gpu = (
        {"kernel_time_ns": ns, "idle_time_ns": int(ns * idle / 100), "compute_time_ns": ns - int(ns * idle / 100)}
        if idle is not None
        else {}
    )
    return pd.DataFrame(
        [{"job_id": "j", "attempt": 0, "rank": r, "step": s, "step_time_ns": ns, **gpu} for r in ranks for s in steps]
    )


def _ranks(ranks, idle):
    return pd.DataFrame(
        [
            {
                "job_id": "j",
                "attempt": 0,
                "rank": r,
                "idle_pct": idle,
                "compute_pct": 100 - idle,
                "non_compute_pct": 0.0,
                "overlap_pct": None,
            }
            for r in ranks
        ]
    )


A_ROWS = [
    (r, s, n, k, d)
    for r in (0, 1)
    for s in (1, 2)
    for n, k, d in [
        ("gemm", "kernel", 100),
        ("nccl_allreduce", "kernel", 50),
        ("aten::mm", "op", 30),
        ("aten::old_op", "op", 10),
        ("cudaLaunchKernel", "runtime", 5),
        ("tiny", "kernel", 2),
    ]
]
B_ROWS = [
    (r, s, n, k, d)
    for r in (0, 1)
    for s in (1, 2)
    for n, k, d in [
        ("gemm", "kernel", 160),
        ("nccl_allreduce", "kernel", 20),
        ("aten::mm", "op", 30),
        ("aten::new_op", "op", 7),
        ("cudaLaunchKernel", "runtime", 5),
        ("tiny", "kernel", 2.4),
    ]
]


def test_statuses_and_per_step_values_by_hand():
    steps = [
        (r, s, f"ProfilerStep#{s}", kind, 300)
        for r in (0, 1)
        for s in (1, 2)
        for kind in ("annotation", "gpu_annotation")
    ]
    old_steps = [(r, s, f"ProfilerStep#{s}", "op", 300) for r in (0, 1) for s in (1, 2)]  # 2020 traces: cpu_op
    a = {
        "events": _events(A_ROWS + steps + [(0, None, "warmup_only", "kernel", 999)]),
        "steps": _steps((0, 1), (1, 2), 10, idle=20.0),
        "ranks": _ranks((0, 1), 20.0),
        "findings": pd.DataFrame(
            [
                {
                    "finding_id": "host_bound/rank=0",
                    "rule": "host_bound",
                    "title": "host",
                    "est_time_lost_per_step_ns": 1e6,
                },
                {
                    "finding_id": "straggler/rank=1",
                    "rule": "straggler",
                    "title": "slow rank",
                    "est_time_lost_per_step_ns": 2e6,
                },
            ]
        ),
    }
    b = {
        "events": _events(B_ROWS + old_steps),
        "steps": _steps((0, 1), (1, 2), 12, idle=30.0),
        "ranks": _ranks((0, 1), 30.0),
        "findings": pd.DataFrame(
            [
                {
                    "finding_id": "straggler/rank=1",
                    "rule": "straggler",
                    "title": "slow rank",
                    "est_time_lost_per_step_ns": 3e6,
                },
                {
                    "finding_id": "exposed_comm/rank=0",
                    "rule": "exposed_comm",
                    "title": "comm",
                    "est_time_lost_per_step_ns": 5e5,
                },
            ]
        ),
    }
    c = compare_jobs(a, b, "A", "B")
    ops = c.ops.set_index("name")
    # 2 ranks × 2 steps, each rank runs each name once per step: per rank and step = dur
    assert c.a_steps == 2 and c.b_steps == 2 and c.a_ranks == 2
    assert ops.loc["gemm", "a_ns_per_step"] == 100 * US and ops.loc["gemm", "b_ns_per_step"] == 160 * US
    assert ops.loc["gemm", "a_max_rank_ns_per_step"] == 100 * US and ops.loc["gemm", "a_n_per_step"] == 1
    assert ops.loc["gemm", "status"] == "slower" and ops.loc["gemm", "delta_pct"] == pytest.approx(60.0)
    assert ops.loc["nccl_allreduce", "status"] == "faster"
    assert ops.loc["nccl_allreduce", "delta_ns_per_step"] == -30 * US
    assert ops.loc["aten::new_op", "status"] == "added" and ops.loc["aten::old_op", "status"] == "removed"
    assert ops.loc["aten::mm", "status"] == "unchanged"
    assert ops.loc["tiny", "status"] == "unchanged"  # +20% but only +0.8 µs per step: below min_abs_ns
    assert "warmup_only" not in ops.index  # outside any ProfilerStep
    assert "ProfilerStep#1" not in ops.index and "ProfilerStep#2" not in ops.index  # step spans, host or device
    assert "cudaLaunchKernel" not in ops.index  # runtime calls are neither kernels nor ops
    assert ops.loc["gemm", "group"] == "kernel" and ops.loc["aten::mm", "group"] == "op"
    assert list(c.added()["name"]) == ["aten::new_op"] and list(c.removed()["name"]) == ["aten::old_op"]
    m = c.metrics.set_index("metric")
    assert m.loc["step_time_p50_ms", "delta"] == pytest.approx(2.0)
    assert m.loc["idle_pct", "delta"] == pytest.approx(10.0) and m.loc["idle_pct", "delta_pct"] == pytest.approx(50.0)
    f = c.findings.set_index("finding_id")["status"].to_dict()
    assert f == {"host_bound/rank=0": "cleared", "straggler/rank=1": "persisting", "exposed_comm/rank=0": "appeared"}
    sm = c.summary_metrics()
    assert sm["compare/n_added"] == 1 and sm["compare/n_slower"] == 1 and sm["compare/findings_cleared"] == 1
    assert sm["delta/step_time_p50_ms"] == pytest.approx(2.0)


def test_kernel_time_is_per_rank_mean_and_max_over_ranks():
    # rank 0 runs the allreduce 30 µs per step, rank 1 waits in it 90 µs; rank 1 alone runs "only_r1"
    rows = [(r, s, "nccl_allreduce", "kernel", 30 if r == 0 else 90) for r in (0, 1) for s in (1, 2)]
    rows += [(1, s, "only_r1", "kernel", 8) for s in (1, 2)]
    c = compare_jobs({"events": _events(rows)}, {"events": _events(rows)})
    ops = c.ops.set_index("name")
    assert ops.loc["nccl_allreduce", "a_ns_per_step"] == 60 * US  # (30 + 90) / 2 ranks: never above a step
    assert ops.loc["nccl_allreduce", "a_max_rank_ns_per_step"] == 90 * US
    assert ops.loc["only_r1", "a_ns_per_step"] == 4 * US and ops.loc["only_r1", "a_max_rank_ns_per_step"] == 8 * US
    assert ops.loc["only_r1", "a_n_per_step"] == 0.5


def test_job_without_steps_is_compared_per_trace():
    a = {"events": _events([(0, None, "k", "kernel", 10), (0, None, "k", "kernel", 10)])}
    b = {"events": _events([(0, 3, "k", "kernel", 10), (0, 4, "k", "kernel", 10)])}
    c = compare_jobs(a, b)
    assert c.a_steps == 1 and c.b_steps == 2
    k = c.ops.set_index("name").loc["k"]
    assert k["a_ns_per_step"] == 20 * US and k["b_ns_per_step"] == 10 * US
    assert any("no ProfilerStep" in n for n in c.notes)
    empty = compare_jobs({}, {})
    assert len(empty.ops) == 0 and len(empty.metrics) == 0


@pytest.fixture(scope="module")
def two_real_jobs(CORPUS):
    from jobs.analyze.hta.breakdown import analyze_rank
    from jobs.landing.discover import CaptureFile
    from jobs.normalize.job import captures_table, normalize_file

    ints = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}
    jobs = {}
    for job, rel in (("A", "sampled_rank-0.json.gz"), ("B", "sampled_rank-1.json.gz")):
        p = CORPUS / "torch" / "HolisticTraceAnalysis" / "trace_filter" / rel
        task = CaptureFile(uri=str(p), capture_id=job, job_id=job, size_bytes=p.stat().st_size).to_dict()
        cap, ev = normalize_file(task, p.read_bytes())
        s, r = analyze_rank(ev)
        jobs[job] = {
            "captures": captures_table([cap]).to_pandas(types_mapper=ints.get),
            "events": ev.to_pandas(types_mapper=ints.get),
            "steps": s.to_pandas(types_mapper=ints.get),
            "ranks": r.to_pandas(types_mapper=ints.get),
        }
    return jobs


def test_real_traces_against_direct_sums(two_real_jobs):
    a, b = two_real_jobs["A"], two_real_jobs["B"]
    c = compare_jobs(a, b, "rank0", "rank1")

    def kernel_sums(ev):
        k = ev[
            ev["is_gpu"].astype(bool)
            & ev["dur_ns"].notna()
            & ev["step"].notna()
            & (ev["ph"] == "X")
            & ~ev["category"].isin(["gpu_user_annotation", "cuda_sync"])
        ]
        n_steps = ev.loc[ev["step"].notna() & ev["dur_ns"].notna() & (ev["ph"] == "X"), "step"].nunique()
        return k.groupby("name")["dur_ns"].sum().astype(float) / n_steps

    ka, kb = kernel_sums(a["events"]), kernel_sums(b["events"])
    kern = c.ops[c.ops["group"] == "kernel"].set_index("name")
    assert set(kern.index) == set(ka.index) | set(kb.index)
    assert not any(str(n).startswith("ProfilerStep#") for n in c.ops["name"])
    assert set(c.added().query("group == 'kernel'")["name"]) == set(kb.index) - set(ka.index)
    assert set(c.removed().query("group == 'kernel'")["name"]) == set(ka.index) - set(kb.index)
    top = ka.idxmax()
    assert kern.loc[top, "a_ns_per_step"] == pytest.approx(ka[top])
    assert kern.loc[top, "b_ns_per_step"] == pytest.approx(kb.get(top, 0.0))
    assert len(c.slower()) + len(c.faster()) > 0
    sa, sb = a["steps"]["step_time_ns"].median() / 1e6, b["steps"]["step_time_ns"].median() / 1e6
    assert c.metrics.set_index("metric").loc["step_time_p50_ms", "delta"] == pytest.approx(sb - sa)
    # a job compared with itself changes nothing
    same = compare_jobs(a, a)
    assert set(same.ops["status"]) == {"unchanged"} and (same.metrics["delta"].fillna(0) == 0).all()
    # the precomputed op summary (what the Spark path collects) gives the same comparison
    via_summary = compare_jobs({**a, "events": None, "op_summary": op_summary(a["events"])}, b)
    pd.testing.assert_frame_equal(via_summary.ops, c.ops)


def test_comparison_report_renders_and_escapes(two_real_jobs):
    from jobs.publish.report.html import render_comparison_report

    a = two_real_jobs["A"]
    b = {
        **two_real_jobs["B"],
        "events": two_real_jobs["B"]["events"].assign(
            name=lambda e: e["name"].where(e.index % 50 != 0, "<script>alert(1)</script>")
        ),
    }
    html = render_comparison_report(compare_jobs(a, b, "A<b>", "B"))
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "A&lt;b&gt;" in html and 'data-plot="op_deltas"' in html and 'data-table="metric-deltas"' in html


def _caps(world, device, model, ranks=(0,)):
    return pd.DataFrame(
        [
            {"job_id": "j", "attempt": 0, "rank": r, "status": "ingested", "world_size": world}
            | {"device_name": device, "model": model, "n_events": 1}
            for r in ranks
        ]
    )


def test_unlike_jobs_are_named_first_and_the_headline_leads_with_step_time():
    rows = [(0, s, "k", "kernel", 10) for s in (1, 2)]
    a = {
        "events": _events(rows),
        "captures": _caps(8, "NVIDIA H100", "llama"),
        "ranks": pd.DataFrame([{"job_id": "j", "attempt": 0, "rank": 0}]),
        "steps": _steps([0], [1, 2], 10.0),
        "findings": pd.DataFrame(
            [{"finding_id": "host_bound/job", "rule": "host_bound", "title": "host", "est_time_lost_per_step_ns": 1}]
        ),
    }
    b = {
        "events": _events(rows[:1]),
        "captures": _caps(1, "NVIDIA A100", "llama"),
        "ranks": a["ranks"],
        "steps": _steps([0], [1, 2], 100.0),
        "findings": pd.DataFrame(
            [{"finding_id": "comm/job", "rule": "comm", "title": "exposed comm", "est_time_lost_per_step_ns": 5}]
        ),
    }
    c = compare_jobs(a, b, "A", "B")
    assert c.warnings == ["world size 8 vs 1", "device NVIDIA H100 vs NVIDIA A100", "captured steps per rank 2 vs 1"]
    assert c.headline() == [
        "job step time p50: 10 ms → 100 ms (+900.0 %)",
        "findings appeared in B: exposed comm",
        "findings cleared in B: host",
    ]
    assert compare_jobs(a, a).warnings == []  # alike: no warning

    from io import StringIO

    from rich.console import Console

    from jobs.publish.compare import print_comparison

    out = StringIO()
    print_comparison(c, Console(file=out, width=200, color_system=None))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("warning: the jobs differ in world size 8 vs 1")
    assert lines[lines.index("compare A → B") + 1] == "job step time p50: 10 ms → 100 ms (+900.0 %)"
    assert max(len(x) for x in lines) <= 80  # fits 80 columns on a wide terminal too


def test_a_finding_on_both_sides_that_grew_is_in_the_headline():
    """newuser15 #14: B's top bottleneck grew from 52.2 to 69.3 ms/step and the headline named only a 0.02 ms
    finding that cleared."""
    rows = [(0, s, "k", "kernel", 10) for s in (1, 2)]

    def side(data_ns: int, extra: list[dict]) -> dict:
        found = [{"finding_id": "dataloader_bound/job", "rule": "dataloader_bound", "title": "data loading",
                  "est_time_lost_per_step_ns": data_ns}, *extra]  # fmt: skip
        return {
            "events": _events(rows),
            "captures": _caps(1, "NVIDIA H100", "m"),
            "ranks": pd.DataFrame([{"job_id": "j", "attempt": 0, "rank": 0}]),
            "steps": _steps([0], [1, 2], 100.0),
            "findings": pd.DataFrame(found),
        }

    small = [{"finding_id": "low/job", "rule": "low", "title": "GPU busy", "est_time_lost_per_step_ns": 20_000}]
    c = compare_jobs(side(52_200_000, small), side(69_300_000, []), "A", "B")
    assert c.headline() == [
        "job step time p50: 100 ms → 100 ms (+0.0 %)",
        "findings that grew in B: data loading (52.2 → 69.3 ms/step)",
        "findings cleared in B: GPU busy",
    ]
    same = compare_jobs(side(52_200_000, []), side(52_300_000, []), "A", "B")  # +0.2 %: not named
    assert same.headline()[1:] == ["findings: the same rules fired on both sides"]
    assert compare_jobs(side(69_300_000, []), side(52_200_000, []), "A", "B").headline()[1] == (
        "findings that shrank in B: data loading (69.3 → 52.2 ms/step)"
    )


def test_tracking_uri_flag_then_environment_then_warehouse_default(monkeypatch, tmp_path):
    from jobs.publish.compare import tracking_uri_of

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking_uri_of("sqlite:///x.db", str(tmp_path)) == ("sqlite:///x.db", "--tracking-uri")
    assert tracking_uri_of(None, str(tmp_path)) == ("http://127.0.0.1:5000", "MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    uri, source = tracking_uri_of(None, str(tmp_path))
    assert uri.startswith("sqlite:///") and uri.endswith("mlflow.db") and source == "the warehouse default"
    assert tracking_uri_of(None, "s3://bucket/wh")[0] is None


# ------------------------------------------------ newuser15 #14: the printed comparison, names cut apart, "N more"

_TEMPLATE = "void at::native::vectorized_elementwise_kernel<4, at::native::{}, at::detail::Array<char*, {}> >(int)"


def test_shorten_distinct_keeps_cut_names_apart():
    from jobs.publish.compare import shorten_distinct

    a, b = _TEMPLATE.format("threshold_kernel_impl<float>", 3), _TEMPLATE.format("clamp_min_scalar_kernel", 2)
    # before: both read "void at::native::vectorized_elem…"
    got = shorten_distinct([a, "short", b, a], 34)
    assert got[1] == "short" and got[0] == got[3] and got[0] != got[2]
    assert all(len(x) <= 34 for x in got)
    assert got[0].startswith("void at::native::") and got[0].endswith(", 3> >(int)")  # the middle cut
    assert got[2].endswith(", 2> >(int)") and got[2].count("…") == 1
    # names alike at both ends: the part where they differ is shown
    c, d = (
        _TEMPLATE.format("threshold(at::TensorIteratorBase&)", 3),
        _TEMPLATE.format("threshold(at::TensorIterator&)", 3),
    )
    got = shorten_distinct([c, d], 34)
    assert len(set(got)) == 2 and all(len(x) <= 34 for x in got), got
    assert "Base&)" in got[0] and "erator&)" in got[1]
    # a cut that is not shared keeps its plain end cut; names that fit are whole
    assert shorten_distinct([a, "gemm"], 20) == [a[:19] + "…", "gemm"]
    # names that differ only past any cut still come out distinct
    e, f = "x" * 50 + "1", "x" * 50 + "2"
    assert len(set(shorten_distinct([e, f, "x" * 60], 10))) == 3


def _kernels_job(names: list[str], ms: float) -> dict:
    rows = [(0, s, n, "kernel", ms * 1000 / (i + 1)) for s in (1, 2) for i, n in enumerate(names)]
    return {
        "events": _events(rows),
        "captures": _caps(1, "NVIDIA H100", "m"),
        "ranks": pd.DataFrame([{"job_id": "j", "attempt": 0, "rank": 0}]),
        "steps": _steps([0], [1, 2], 100.0),
    }


def test_print_comparison_tells_kernels_apart_says_how_many_more_and_the_same_run():
    """newuser15 #14: ``k void at::native::vectorized_element…`` twice in "added", "added in B: 17" listing 10 with no
    "7 more", and no word that A and B were one run."""
    from io import StringIO

    from rich.console import Console

    from jobs.publish.compare import print_comparison

    added = [_TEMPLATE.format(f"kernel_{i}<float>", i) for i in range(13)]
    c = compare_jobs(_kernels_job(["gemm"], 1.0), _kernels_job(["gemm", *added], 1.0), "j#0", "j#1")
    out = StringIO()
    print_comparison(c, Console(file=out, width=120, color_system=None), limit=10)
    lines = out.getvalue().splitlines()
    assert max(len(x.rstrip()) for x in lines) <= 80
    start = lines.index(next(x for x in lines if x.startswith("added in B: 13 kernel(s)/op(s)")))
    shown = [x.split("  ")[1] for x in lines[start + 4 : start + 14]]
    assert len(set(shown)) == 10 and all(x.startswith("k void at::native::") for x in shown), shown
    assert lines[start + 15] == "  … 3 more added in B not shown (the largest 10 are)"
    assert not any("A and B are the same run" in x for x in lines)

    same = StringIO()
    job = _kernels_job(["gemm"], 1.0)
    print_comparison(compare_jobs(job, job, "j#0", "j#0"), Console(file=same, width=80, color_system=None))
    assert same.getvalue().splitlines()[0] == "A and B are the same run (j#0): every difference below is 0"


def test_comparison_subtitle_prints_whole_steps_per_rank_as_integers():
    """newuser15 #16: the compare HTML said "6.0 step(s)/rank"."""
    from types import SimpleNamespace

    from jobs.publish.report.sections import comparison_subtitle

    c = SimpleNamespace(a_label="a#0", b_label="b#0", a_ranks=8, b_ranks=2, a_steps=6.0, b_steps=2.5)
    text = comparison_subtitle(c)
    assert "A = a#0: 8 rank(s), 6 step(s)/rank · B = b#0: 2 rank(s), 2.5 step(s)/rank" in text


def test_kernel_tables_show_the_delta_they_are_sorted_by():
    """newuser15 #14: "slower in B" was sorted by a Δ ms column it did not show (its Δ % looked unsorted)."""
    from io import StringIO

    from rich.console import Console

    from jobs.publish.compare import print_comparison

    # A: big 10 ms, small 0.1 ms; B: big 12 ms (+2 ms, +20 %), small 0.3 ms (+0.2 ms, +200 %)
    a = {**_kernels_job(["big"], 10.0)}
    a["events"] = _events([(0, s, n, "kernel", us) for s in (1, 2) for n, us in (("big", 10_000), ("small", 100))])
    b = {
        **a,
        "events": _events([(0, s, n, "kernel", us) for s in (1, 2) for n, us in (("big", 12_000), ("small", 300))]),
    }
    out = StringIO()
    print_comparison(compare_jobs(a, b, "a#0", "b#0"), Console(file=out, width=80, color_system=None))
    lines = out.getvalue().splitlines()
    start = lines.index(next(x for x in lines if x.startswith("slower in B: 2 kernel(s)/op(s)")))
    assert "largest Δ ms first" in lines[start] and lines[start + 2].split()[-2:] == ["Δ", "ms"]
    rows = [x.split() for x in lines[start + 4 : start + 6]]
    assert [r[1] for r in rows] == ["big", "small"] and [r[-1] for r in rows] == ["2.000", "0.200"]
