"""Analysis windows: what a job's step-based numbers and rules are computed over.

A rank's windows are its ProfilerSteps (``steps`` rows, ``window`` = ``"step"``). A rank capture with no
ProfilerStep gets one window over its whole trace instead (``step`` = :data:`WHOLE_TRACE_STEP`, ``window`` =
``"trace"``): the ``ranks`` row's whole-trace HTA temporal breakdown and HTA-parity statistics (the same columns as
``steps``), with ``step_start_ns`` = the capture's ``trace_start_ns`` and ``step_time_ns`` = ``trace_end_ns`` −
``trace_start_ns`` (ns). So a trace without ProfilerStep is judged on the whole trace instead of not at all, and
every consumer (rules, fleet statistics, reports) says which window a number comes from.
"""

from __future__ import annotations

import pandas as pd

from schemas import STEPS

__all__ = ["WHOLE_TRACE_STEP", "WINDOW_STEP", "WINDOW_TRACE", "analysis_windows"]

#: ``step`` of a whole-trace window (as ``kernels.step`` for device events outside any ProfilerStep).
WHOLE_TRACE_STEP = -1
WINDOW_STEP = "step"
WINDOW_TRACE = "trace"
_RANK_KEY = ["job_id", "attempt", "rank", "capture_id"]


def analysis_windows(
    steps: pd.DataFrame | None, ranks: pd.DataFrame | None, captures: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The analysis windows of the rank captures in ``ranks`` and ``steps`` (module docstring).

    Args:
        steps: ``steps`` rows (may be None or empty).
        ranks: ``ranks`` rows (may be None or empty): a rank capture with no row in ``steps`` becomes one
            whole-trace window.
        captures: ``captures`` rows with ``capture_id``, ``trace_start_ns``, ``trace_end_ns``; without them (or
            without a span) the whole-trace window lasts the rank's ``kernel_time_ns`` (the GPU's active span).

    Returns:
        The ``steps`` columns plus ``window`` (``"step"`` | ``"trace"``): every ``steps`` row, then one row per
        rank capture without ProfilerStep. Integer columns stay nullable.
    """
    cols = list(STEPS.names)
    parts = []
    if steps is not None and len(steps):
        s = steps.copy()
        for c in cols:
            if c not in s:
                s[c] = pd.NA
        s["window"] = WINDOW_STEP
        parts.append(s[[*cols, "window"]])
    if ranks is not None and len(ranks):
        r = ranks
        if steps is not None and len(steps):
            have = steps[_RANK_KEY].drop_duplicates().assign(_has=True)
            r = r.merge(have, on=_RANK_KEY, how="left")
            r = r[r["_has"].isna()].drop(columns="_has")
        if len(r):
            w = pd.DataFrame({c: (r[c].to_numpy() if c in r else pd.NA) for c in cols}, index=range(len(r)))
            w["step"] = WHOLE_TRACE_STEP
            # integer ns throughout: epoch timestamps (~1.7e18) do not survive a float64 round trip
            span = pd.Series(pd.NA, index=w.index, dtype="Int64")
            start = pd.Series(pd.NA, index=w.index, dtype="Int64")
            if captures is not None and len(captures) and {"trace_start_ns", "trace_end_ns"} <= set(captures):
                c = captures.drop_duplicates("capture_id").set_index("capture_id")
                cid = pd.Series(r["capture_id"].to_numpy(), index=w.index)
                start = cid.map(c["trace_start_ns"]).astype("Int64")
                span = cid.map(c["trace_end_ns"]).astype("Int64") - start
            gpu_span = pd.to_numeric(pd.Series(w["kernel_time_ns"]), errors="coerce").round().astype("Int64")
            w["step_time_ns"] = span.where(span.fillna(0) > 0, gpu_span).astype("Int64")
            w["step_start_ns"] = start
            w["window"] = WINDOW_TRACE
            parts.append(w)
    if not parts:
        return pd.DataFrame(columns=[*cols, "window"])
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)
    # a column all null in one part (e.g. cpu_op_time_ns of whole-trace windows) takes the other part's dtype
    kept = [p.dropna(axis=1, how="all") for p in parts]
    return pd.concat(kept, ignore_index=True).reindex(columns=[*cols, "window"])
