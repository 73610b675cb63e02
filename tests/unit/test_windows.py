"""Unit tests of jobs.analyze.windows.analysis_windows and the windows the findings rules judge
(jobs.analyze.findings.ranking.job_windows / events_in_windows): a rank capture without ProfilerStep is one
whole-trace window spanning its capture, a rank with steps keeps its steps, and a capture whose steps were all
dropped is not re-judged on its whole trace."""

from __future__ import annotations

import corpus_jobs
import pandas as pd
import pytest

from jobs.analyze.findings.ranking import events_in_windows, job_windows
from jobs.analyze.windows import WHOLE_TRACE_STEP, WINDOW_STEP, WINDOW_TRACE, analysis_windows
from schemas.tables import STEPS


@pytest.fixture(scope="module")
def alexnet():
    if not corpus_jobs.available("alexnet"):
        pytest.skip("needs the alexnet trace in ../shared/corpus")
    return corpus_jobs.corpus_job("alexnet")[0]


def test_rank_without_profiler_step_is_one_whole_trace_window(alexnet):
    caps, ranks = alexnet["captures"], alexnet["ranks"]
    w = analysis_windows(alexnet["steps"], ranks, caps)
    assert len(w) == 1 and list(w.columns) == [*STEPS.names, "window"]
    row = w.iloc[0]
    assert (row["step"], row["window"]) == (WHOLE_TRACE_STEP, WINDOW_TRACE)
    span = int(caps["trace_end_ns"].iloc[0] - caps["trace_start_ns"].iloc[0])
    assert row["step_time_ns"] == span and 43e9 < span < 44e9  # the 43.5 s trace
    assert row["step_start_ns"] == caps["trace_start_ns"].iloc[0]
    assert row["cpu_bound_time_ns"] == ranks["cpu_bound_time_ns"].iloc[0]  # the ranks row's breakdown
    # without captures the window lasts the GPU's active span
    assert analysis_windows(None, ranks).iloc[0]["step_time_ns"] == ranks["kernel_time_ns"].iloc[0]


def test_job_windows_derive_gpu_busy_and_idle(alexnet):
    w = job_windows(alexnet["steps"], alexnet["ranks"], alexnet["captures"])
    row = w.iloc[0]
    assert row["has_gpu"] and row["busy_ns"] == row["kernel_time_ns"] - row["idle_time_ns"]
    assert row["busy_ns"] + row["gpu_idle_ns"] == row["step_time_ns"]
    assert 100 * row["busy_ns"] / row["step_time_ns"] < 0.2  # the GPU is busy 0.15 % of the trace


def test_ranks_with_steps_keep_their_steps(alexnet):
    ranks = alexnet["ranks"]
    steps = pd.DataFrame([{c: ranks[c].iloc[0] if c in ranks else None for c in STEPS.names}]).assign(
        step=7, step_time_ns=10**6
    )
    w = analysis_windows(steps, ranks, alexnet["captures"])
    assert list(w["window"]) == [WINDOW_STEP] and list(w["step"]) == [7]


def test_capture_with_profiler_steps_gets_no_whole_trace_window(alexnet):
    """All steps of a truncated capture may be dropped (drop_truncated_steps): it is not judged as a whole trace."""
    caps = alexnet["captures"].assign(n_profiler_steps=3)
    assert job_windows(alexnet["steps"], alexnet["ranks"], caps).empty
    assert len(job_windows(alexnet["steps"], alexnet["ranks"], caps.assign(n_profiler_steps=0))) == 1


def test_events_outside_steps_belong_to_the_whole_trace_window(alexnet):
    w = job_windows(alexnet["steps"], alexnet["ranks"], alexnet["captures"])
    ev = alexnet["events"]
    assert len(ev) and ev["step"].isna().all()
    moved = events_in_windows(ev, w)
    assert (moved["step"] == WHOLE_TRACE_STEP).all() and ev["step"].isna().all()  # input untouched
    other = ev.assign(capture_id="elsewhere")
    assert events_in_windows(other, w)["step"].isna().all()
