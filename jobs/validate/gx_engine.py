"""How tracelake runs Great Expectations 1.x fast on large pandas frames (the suites are in
:mod:`jobs.validate.suites`; this module only decides *how* GX evaluates them).

Measured with cProfile on GX 1.24.1 (great-expectations==1.24.1, pandas 2), a 1M-row ``events``
projection: 43 % of the time went to ``ColumnValuesBetween._pandas`` calling a Python function per
value, 48 % to copying the whole batch frame, and creating the ephemeral context took ~2.5 s per
validate stage. Three remedies, none of which changes what GX reports:

* **one context per process** (:func:`context`): the context is ephemeral (in-memory stores, nothing on
  disk), so it is created once and reused; every suite and data source gets a unique name
  (:func:`unique_name`) and is deleted after its validation.
* **vectorized ``column_values.between`` for nullable dtypes** (:func:`register_metrics`): GX 1.24.1
  vectorizes the comparison only for numpy ``int64``/``float64`` and datetime columns; pandas'
  nullable ``Int8``–``Int64``/``UInt*``/``Float32``/``Float64`` columns (how the warehouse's integer
  columns are read, exact ns with nulls) fall back to ``Series.map`` with a Python comparison per value.
  The replacement compares the same non-null values with numpy (GX filters nulls before the condition)
  and hands everything else to GX's own implementation, so results are identical.
* **narrow batches** (:func:`column_groups`): for every column-map metric, GX's pandas engine filters
  the *whole* batch frame (``df[df[col].notnull()]``, then by the unexpected mask), up to four times
  per expectation; on a wide, multi-million-row frame that copying is most of the run. Large frames are
  therefore validated one group of columns at a time — each expectation sees a frame holding only the
  columns it reads — and the groups' results are merged into one suite result, in suite order
  (:func:`merge_results`). Small frames stay one batch.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import threading

import numpy as np
import pandas as pd

#: No usage statistics leave the machine (GX 1.x reads this when the context starts).
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

#: A frame with more cells (rows × columns) than this is validated in narrow batches
#: (:func:`column_groups`); below it the per-batch overhead of GX (~10 ms) outweighs the copying saved.
NARROW_MIN_CELLS = 2_000_000

_LOCK = threading.Lock()
_CONTEXT = None
_NAMES = itertools.count()


def context():
    """The process's ephemeral GX context (in-memory stores, no analytics, no progress bars),
    created on first use with :func:`register_metrics` applied."""
    global _CONTEXT
    with _LOCK:
        if _CONTEXT is None:
            import great_expectations as gx  # heavy: great_expectations
            from great_expectations.data_context.types.base import (  # heavy: great_expectations
                DataContextConfig,
                InMemoryStoreBackendDefaults,
                ProgressBarsConfig,
            )

            register_metrics()
            _CONTEXT = gx.get_context(
                mode="ephemeral",
                project_config=DataContextConfig(
                    store_backend_defaults=InMemoryStoreBackendDefaults(),
                    analytics_enabled=False,
                    progress_bars=ProgressBarsConfig(globally=False),
                ),
            )
        return _CONTEXT


def unique_name(prefix: str) -> str:
    """``prefix`` plus a process-wide counter and the process id: suite and data-source names in a
    shared context never collide (two validations of the same table, or threads)."""
    return f"{prefix}#{os.getpid()}.{next(_NAMES)}"


_REGISTERED = False


def nullable_between(column: pd.Series, min_value=None, max_value=None, strict_min=None, strict_max=None):
    """GX's ``column_values.between`` condition (True: the value is within the bounds) for a nullable
    numeric column without nulls, compared with numpy; ``None`` for anything else (GX's own code then
    decides, errors included). Bounds are inclusive unless ``strict_min``/``strict_max``, as in GX."""
    if (
        not isinstance(column.array, (pd.arrays.IntegerArray, pd.arrays.FloatingArray))
        or (min_value is None and max_value is None)
        or (min_value is not None and max_value is not None and min_value > max_value)
        or column.isna().any()
    ):
        return None
    v = column.to_numpy(dtype=column.dtype.numpy_dtype)
    ok = np.ones(len(v), dtype=bool)
    if min_value is not None:
        ok &= (v > min_value) if strict_min else (v >= min_value)
    if max_value is not None:
        ok &= (v < max_value) if strict_max else (v <= max_value)
    return pd.Series(ok, index=column.index)


def register_metrics() -> None:
    """Replace GX's pandas ``column_values.between`` condition by one that compares nullable numeric
    columns with numpy (same values, same bounds, same strictness; see the module docstring). Idempotent."""
    global _REGISTERED
    if _REGISTERED:
        return
    from great_expectations.execution_engine import PandasExecutionEngine  # heavy: great_expectations
    from great_expectations.expectations.metrics.column_map_metrics.column_values_between import (  # heavy: GX
        ColumnValuesBetween,
    )
    from great_expectations.expectations.metrics.map_metric_provider import (  # heavy: great_expectations
        column_condition_partial,
    )

    gx_between = inspect.unwrap(ColumnValuesBetween._pandas)  # GX's own function, without its decorators
    reg = logging.getLogger("great_expectations.expectations.registry")
    level = reg.level
    reg.setLevel(logging.ERROR)  # "registered with different metric_provider; overwriting" is the point
    try:

        class NullableColumnValuesBetween(ColumnValuesBetween):
            """``column_values.between`` with a vectorized path for pandas' nullable numeric dtypes."""

            @column_condition_partial(engine=PandasExecutionEngine)
            def _pandas(cls, column, min_value=None, max_value=None, strict_min=None, strict_max=None, **kwargs):
                fast = nullable_between(column, min_value, max_value, strict_min, strict_max)
                if fast is not None:
                    return fast
                return gx_between(
                    cls,
                    column,
                    min_value=min_value,
                    max_value=max_value,
                    strict_min=strict_min,
                    strict_max=strict_max,
                    **kwargs,
                )

        # (GX's MetaMetricProvider registers the class's metric functions when the class is created)
    finally:
        reg.setLevel(level)
    _REGISTERED = True


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its object (string) columns as pandas categoricals, for GX only: the same values
    and nulls, but GX's null tests, batch fingerprint (``hash_pandas_object``), ``isin`` and
    ``duplicated`` then work on integer codes instead of Python objects. A column with nulls is left
    as it is (a categorical turns ``None`` into ``NaN``, which GX would report), and so is one whose
    values are not hashable."""
    out = {}
    for name in frame.columns:
        s = frame[name]
        if s.dtype == object:
            try:
                cat = s.astype("category")
            except TypeError:
                cat = None
            if cat is not None and not (cat.cat.codes.to_numpy() < 0).any():
                s = cat
        out[name] = s
    return pd.DataFrame(out, index=frame.index, copy=False)


def _reads(expectation) -> tuple[str, ...]:
    """The batch columns a GX expectation reads (``column`` or ``column_list``; none for table-level ones)."""
    kw = expectation.configuration.kwargs
    if kw.get("column") is not None:
        return (kw["column"],)
    return tuple(kw.get("column_list") or ())


def column_groups(frame, expectations: list) -> list[tuple[tuple[str, ...], list]]:
    """``[(columns, expectations)]``: the expectations that read the same columns, in first-use order.

    Table-level expectations (no column) join the first group: every group's frame has all the rows.
    """
    groups: dict[tuple[str, ...], list] = {}
    for e in expectations:
        groups.setdefault(_reads(e), []).append(e)
    table_level = groups.pop((), [])
    out = list(groups.items())
    if table_level:
        out = [(out[0][0], table_level + out[0][1])] if out else [((), table_level)]
        out += list(groups.items())[1:]
    return out


def merge_results(parts: list, suite_name: str):
    """One ``ExpectationSuiteValidationResult`` from the results of several batches of one table, built
    as GX's own ``V1Validator.validate_expectation_suite`` builds it (statistics by
    ``calc_validation_statistics``); ``meta`` and ``batch_id`` are those of the first batch."""
    from great_expectations.core.expectation_validation_result import (  # heavy: great_expectations
        ExpectationSuiteValidationResult,
    )
    from great_expectations.validator.validator import calc_validation_statistics  # heavy: GX

    results = [r for p in parts for r in p.results]
    stats = calc_validation_statistics(results)
    return ExpectationSuiteValidationResult(
        results=results,
        success=stats.success,
        suite_name=suite_name,
        statistics={
            "evaluated_expectations": stats.evaluated_expectations,
            "successful_expectations": stats.successful_expectations,
            "unsuccessful_expectations": stats.unsuccessful_expectations,
            "success_percent": stats.success_percent,
        },
        meta=parts[0].meta,
        batch_id=parts[0].batch_id,
    )


def merge_result_dicts(parts: list[dict], partial: int) -> dict:
    """One suite result (GX's ``to_json_dict`` form) from the results of the same suite on disjoint row batches
    of one table: per expectation (matched by ``meta.check_id``) success on every batch, element, unexpected and
    missing counts added up, the percentages recomputed as GX's column-map metrics define them (unexpected
    % of non-missing rows; ``_total``: of all rows), the first ``partial`` unexpected values kept (the
    ``partial_unexpected_count`` the suite ran with); the suite statistics recomputed. ``{}`` for no part."""
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return parts[0] if parts else {}

    def key(r: dict) -> str:
        cfg = r.get("expectation_config") or {}
        return str((cfg.get("meta") or {}).get("check_id") or cfg.get("type"))

    merged: dict[str, dict] = {}
    for part in parts:
        for r in part.get("results", []):
            k = key(r)
            if k not in merged:
                merged[k] = {**r, "result": dict(r.get("result") or {})}
                continue
            m, res = merged[k], r.get("result") or {}
            m["success"] = bool(m["success"]) and bool(r.get("success"))
            if r.get("exception_info", {}).get("raised_exception") and not m.get("exception_info", {}).get(
                "raised_exception"
            ):
                m["exception_info"] = r["exception_info"]
            out = m["result"]
            for n in ("element_count", "unexpected_count", "missing_count"):
                if res.get(n) is not None:
                    out[n] = (out.get(n) or 0) + res[n]
            if res.get("partial_unexpected_list"):
                have = list(out.get("partial_unexpected_list") or [])
                out["partial_unexpected_list"] = (have + list(res["partial_unexpected_list"]))[:partial]
    for m in merged.values():
        out = m["result"]
        total, bad, missing = out.get("element_count"), out.get("unexpected_count"), out.get("missing_count") or 0
        if total and bad is not None:
            present = total - missing
            out["unexpected_percent_total"] = bad / total * 100.0
            out["unexpected_percent"] = out["unexpected_percent_nonmissing"] = (
                bad / present * 100.0 if present else None
            )
        if total and "missing_percent" in out:
            out["missing_percent"] = missing / total * 100.0
        out.pop("partial_unexpected_counts", None)  # per batch: not additive without every value
        out.pop("partial_unexpected_index_list", None)
    results = list(merged.values())
    ok = sum(bool(r["success"]) for r in results)
    return {
        **parts[0],
        "results": results,
        "success": ok == len(results),
        "statistics": {
            "evaluated_expectations": len(results),
            "successful_expectations": ok,
            "unsuccessful_expectations": len(results) - ok,
            "success_percent": ok / len(results) * 100.0 if results else None,
        },
    }


def run_suite(
    frame,
    suite_name: str,
    source_prefix: str,
    asset: str,
    expectations: list,
    spark: bool,
    result_format: dict,
    ctx=None,
):
    """Validate ``expectations`` on ``frame`` in the shared context and return GX's suite result.

    A pandas frame of more than :data:`NARROW_MIN_CELLS` cells is validated in narrow batches
    (:func:`column_groups`, merged by :func:`merge_results`); a Spark frame or a small one in one batch.
    The data source gets a unique name and is deleted afterwards; the suite is not stored. ``ctx``: the
    GX context (default: :func:`context`).
    """
    import great_expectations as gx  # heavy: great_expectations

    ctx = ctx or context()
    name = unique_name(source_prefix)
    src = ctx.data_sources.add_spark(name) if spark else ctx.data_sources.add_pandas(name)
    try:
        bd = src.add_dataframe_asset(asset).add_batch_definition_whole_dataframe("batch")
        if not spark:
            frame = compact(frame)
        narrow = not spark and frame.shape[0] * max(frame.shape[1], 1) > NARROW_MIN_CELLS
        if not narrow:
            groups = [(None, expectations)]
        else:
            groups = column_groups(frame, expectations) or [(None, expectations)]
        parts = []
        for cols, exps in groups:
            part = frame if cols is None else frame[list(cols)]
            suite = gx.ExpectationSuite(name=suite_name, expectations=exps)
            parts.append(
                bd.get_batch(batch_parameters={"dataframe": part}).validate(suite, result_format=result_format)
            )
        return parts[0] if len(parts) == 1 else merge_results(parts, suite_name)
    finally:
        ctx.data_sources.delete(name)
