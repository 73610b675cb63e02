"""Regressions of a job run against the previous runs with the same job name (``regressions`` table).

Pure pandas: one or more job names' job steps in, one row per (run, metric) out. :mod:`jobs.fleet.job` calls
:func:`find_regressions` once per fleet run, on the driver, over every job name, for the capture days whose runs or
baselines changed (:func:`dates_to_compare`; every day on a rebuild): the multiple-testing correction below spans
one day's runs, so a run's row changes only when its day's runs or its baseline do, never because history grew.
:func:`find_regressions` is :func:`compare_runs` (the tests, independent per job name: on a whole derivation on Spark
they run per job name on the executors, :mod:`jobs.fleet.on_spark`) then :func:`decide` (the correction and
verdicts, on the driver).

Method, per run in ``run_key`` order (manifest ``created_at``, else date; then job id, attempt):

* outlier steps: in every run with at least :data:`OUTLIER_MIN_STEPS` steps, the steps whose job step time is
  above Q3 + :data:`OUTLIER_IQR` × IQR of that run's own step times (warm-up, checkpoint, a GC pause) are
  dropped from the statistics (``value``, ``baseline``, ``change_pct``, ``noisy``, ``n_steps``) — at most a
  quarter of the run's steps (the slowest ones first); ``n_dropped`` counts the run's own dropped steps. The
  rank test and the interval below use every step: they are rank-based, so outliers move them little, and
  trimming each run by its own fence breaks the exchangeability the test's null distribution rests on
  (benchmarks/regression_power.py measured 1.6 % raw false alarms at alpha 1 % with trimmed samples on a
  busy fleet, against 0.8 % for the exact test); ``no_baseline`` still counts the kept steps;
* ``noisy``: the run's own (kept) step times are very unequal — p90 / p50 above :data:`NOISY_P90_P50`;
* baseline = the kept steps of the previous ``baseline_runs`` runs (default 5) of the same job name, pooled;
* per metric (:data:`METRICS`) the run's statistic and the baseline's statistic over the pooled steps:
  ``step_time_p50_ns`` / ``step_time_p90_ns`` of the job step time (slowest rank per step,
  :func:`jobs.fleet.stats.reduce_job_steps`), ``idle_pct`` (Σ idle / Σ kernel time × 100, HTA
  ``idle_time_pctg`` time-weighted) and ``exposed_comm_pct`` (Σ exposed comm / Σ rank step time × 100);
* significance: a two-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu``) of the run's per-step
  values against the baseline's per-step values (step time for the step-time metrics, the per-step
  percentage for the others), raw ``p_value``; ``p_adjusted`` is the Benjamini–Hochberg adjusted p over the
  (run, metric) tests of the runs of one capture date (``date``: the run's first capture date), every job name
  together (:func:`bh_adjust`; Benjamini & Hochberg 1995, JRSS B 57:289);
* estimate and interval: the Hodges–Lehmann estimate of the shift (median of all run − baseline pairwise
  differences) with its distribution-free confidence interval from the Mann–Whitney U null distribution
  (Hollander & Wolfe, *Nonparametric Statistical Methods*, 2nd ed. 1999, §4.3: order statistics
  ``k`` and ``nm + 1 − k`` of the pairwise differences; exact U distribution for small samples, normal
  approximation above :data:`EXACT_MAX_PAIRS` pairs) at confidence 1 − 2·``alpha`` (98 % by default: the
  interval of a TOST equivalence test at level ``alpha``). Step-time metrics shift the log step times, so
  the estimate and the bounds are ratios, reported as % change (``exp(shift) − 1``) — a shift of the
  whole step distribution, the same for the p50 and the p90 row; percentage metrics shift the per-step
  percentage, reported in percentage points;
* verdict: ``regression`` when the metric moved the bad way by more than the threshold (``change_pct``
  beyond ``threshold_pct`` for times, ``delta`` beyond ``threshold_pp`` percentage points for percentages)
  and ``p_adjusted`` < ``alpha``; ``improvement`` the same the good way; ``unchanged`` only when the
  interval lies inside ± the threshold (the data show any change is smaller than the threshold); else
  ``inconclusive`` with a ``reason`` in words (too few steps, too noisy, more steps would decide, not
  significant after the correction) that ends with what would decide: the steps per run at which the interval
  would be narrow enough (:func:`steps_to_decide`); ``no_baseline`` for the first run or with fewer than
  ``MIN_STEPS`` steps on a side (``reason`` says which);
* ``summary``: the row in words (:func:`in_words`), the one sentence every reader shows (CLI, demo, job and fleet
  reports, MLflow tag, MCP): ``job step p50 4.26 → 48.4 ms, +1,037 % [−8 %, +1,300 %]: inconclusive — too noisy
  …; 8 vs 8 steps, noisy baseline``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pandas as pd

#: Metrics compared; for each: (per-step sample column, aggregate function name, lower is better).
METRICS = ("step_time_p50_ns", "step_time_p90_ns", "idle_pct", "exposed_comm_pct")
MIN_STEPS = 3
#: Outlier rule: only in runs with at least this many steps; fence Q3 + OUTLIER_IQR × IQR; at most a quarter.
OUTLIER_MIN_STEPS = 8
OUTLIER_IQR = 3.0
#: A run is ``noisy`` when its kept step times have p90 / p50 above this.
NOISY_P90_P50 = 1.5
#: Default number of previous runs of the job name pooled as the baseline.
BASELINE_RUNS = 5
#: Default thresholds: relative step-time change (%) and change of a percentage metric (points) that count.
THRESHOLD_PCT, THRESHOLD_PP = 5.0, 2.0
#: Default significance level of the Benjamini–Hochberg adjusted p (false discovery rate).
DEFAULT_ALPHA = 0.01
#: Exact U distribution up to this many run × baseline pairs, normal approximation above.
EXACT_MAX_PAIRS = 4000
OUTPUT_COLUMNS = [
    "job_name",
    "job_id",
    "attempt",
    "date",
    "run_index",
    "metric",
    "value",
    "baseline",
    "change_pct",
    "delta",
    "change_est_pct",
    "change_ci_low_pct",
    "change_ci_high_pct",
    "p_value",
    "p_adjusted",
    "verdict",
    "reason",
    "noisy",
    "baseline_runs",
    "n_steps",
    "n_baseline_steps",
    "n_dropped",
    "summary",
]
#: The metrics in words (:func:`in_words`).
METRIC_WORDS = {
    "step_time_p50_ns": "job step p50",
    "step_time_p90_ns": "job step p90",
    "idle_pct": "GPU idle",
    "exposed_comm_pct": "exposed communication",
}
#: Input columns (one row per job step).
INPUT_COLUMNS = [
    "job_name",
    "job_id",
    "attempt",
    "run_key",
    "run_date",
    "step",
    "step_time_ns",
    "rank_step_time_ns",
    "kernel_time_ns",
    "idle_time_ns",
    "exposed_comm_ns",
]


def _pct(num: pd.Series, den: pd.Series) -> float | None:
    d = float(den.sum())
    return float(num.sum()) / d * 100.0 if d > 0 else None


def _statistic(metric: str, s: pd.DataFrame) -> float | None:
    """The metric over a set of job steps (see module docstring)."""
    if s.empty:
        return None
    if metric == "step_time_p50_ns":
        return float(np.percentile(s["step_time_ns"].to_numpy(dtype=float), 50))
    if metric == "step_time_p90_ns":
        return float(np.percentile(s["step_time_ns"].to_numpy(dtype=float), 90))
    if metric == "idle_pct":
        return _pct(s["idle_time_ns"], s["kernel_time_ns"])
    if metric == "exposed_comm_pct":
        return _pct(s["exposed_comm_ns"], s["rank_step_time_ns"])
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def _samples(metric: str, s: pd.DataFrame) -> np.ndarray:
    """Per-step values the significance test compares (NaN-free)."""
    if metric.startswith("step_time"):
        v = s["step_time_ns"].to_numpy(dtype=float)
    else:
        num, den = (
            ("idle_time_ns", "kernel_time_ns") if metric == "idle_pct" else ("exposed_comm_ns", "rank_step_time_ns")
        )
        n, d = s[num].to_numpy(dtype=float), s[den].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.where(d > 0, n / d * 100.0, np.nan)
    return v[np.isfinite(v)]


def _p_value(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        return None
    from scipy.stats import mannwhitneyu  # heavy: scipy, only for the significance test

    if np.all(a == a[0]) and np.all(b == a[0]):
        return 1.0  # identical constant samples: no shift
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def drop_outliers(step_time: np.ndarray) -> np.ndarray:
    """Mask of the steps kept by the outlier rule (module docstring): with at least :data:`OUTLIER_MIN_STEPS`
    steps, drop those above Q3 + :data:`OUTLIER_IQR` × IQR, the slowest first, at most a quarter of them."""
    keep = np.ones(len(step_time), dtype=bool)
    if len(step_time) < OUTLIER_MIN_STEPS:
        return keep
    q1, q3 = np.percentile(step_time, [25, 75])
    out = np.flatnonzero(step_time > q3 + OUTLIER_IQR * (q3 - q1))
    out = out[np.argsort(-step_time[out], kind="stable")][: len(step_time) // 4]
    keep[out] = False
    return keep


def is_noisy(step_time: np.ndarray) -> bool:
    """p90 / p50 of the step times above :data:`NOISY_P90_P50` (False with fewer than ``MIN_STEPS`` steps)."""
    v = step_time[np.isfinite(step_time)]
    if len(v) < MIN_STEPS:
        return False
    p50, p90 = np.percentile(v, [50, 90])
    return bool(p50 > 0 and p90 / p50 > NOISY_P90_P50)


@lru_cache(maxsize=256)
def _u_rank(n: int, m: int, confidence: float) -> int:
    """``k`` of the Hodges–Lehmann interval: the interval at ``confidence`` is the k-th smallest to the k-th
    largest of the n·m pairwise differences; 0 when no finite interval reaches that confidence."""
    half = (1.0 - confidence) / 2.0
    if n * m <= EXACT_MAX_PAIRS:
        # exact null distribution of U: f(i, j)[u] = i/(i+j) f(i-1, j)[u-j] + j/(i+j) f(i, j-1)[u]
        prev = [np.ones(1) for _ in range(m + 1)]  # i = 0
        for i in range(1, n + 1):
            cur = [np.ones(1)]
            for j in range(1, m + 1):
                f = np.zeros(i * j + 1)
                a = prev[j]
                f[j : j + len(a)] += i / (i + j) * a
                b = cur[j - 1]
                f[: len(b)] += j / (i + j) * b
                cur.append(f)
            prev = cur
        cdf = np.cumsum(prev[m])
        return int(np.searchsorted(cdf, half * (1 + 1e-9), side="right"))  # P(U <= k - 1) <= half
    from scipy.stats import norm  # heavy: scipy

    z = float(norm.ppf(1.0 - half))
    return max(0, int(math.floor(n * m / 2.0 - z * math.sqrt(n * m * (n + m + 1) / 12.0))))


def hodges_lehmann(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float | None, float | None]:
    """Hodges–Lehmann shift of ``a`` against ``b`` (median of a_i − b_j) and its distribution-free interval at
    ``confidence`` (Hollander & Wolfe §4.3); the bounds are None when the samples are too small for it."""
    d = np.sort(np.subtract.outer(a, b).ravel())
    k = _u_rank(len(a), len(b), confidence)
    est = float(np.median(d))
    if k < 1:
        return est, None, None
    return est, float(d[k - 1]), float(d[len(d) - k])


def bh_adjust(p: np.ndarray) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (NaN stays NaN and does not count as a test)."""
    p = np.asarray(p, dtype=float)
    out = np.full(len(p), np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if not len(ok):
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    adj = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum(1.0, np.minimum.accumulate(adj[::-1])[::-1])
    out[order] = adj
    return out


def options_with_defaults(**given) -> dict:
    """:func:`find_regressions`' options with the defaults filled in (what a fleet run's rows were made with).

    Raises:
        TypeError: an option :func:`find_regressions` does not take.
    """
    unknown = set(given) - {"baseline_runs", "threshold_pct", "threshold_pp", "alpha"}
    if unknown:
        raise TypeError(f"unknown regression options {sorted(unknown)}")
    defaults = {"baseline_runs": BASELINE_RUNS, "threshold_pct": THRESHOLD_PCT, "threshold_pp": THRESHOLD_PP}
    return {**defaults, "alpha": DEFAULT_ALPHA, **given}


def run_sequence(job_steps: pd.DataFrame) -> pd.DataFrame:
    """The runs of each job name in comparison order: ``job_name, job_id, attempt, run_key, run_date`` (one row per
    run of ``job_steps``, :data:`INPUT_COLUMNS`, or of one row per run), sorted by job name, ``run_key``, job id,
    attempt."""
    key = ["job_name", "job_id", "attempt"]
    if job_steps.duplicated(key).any():
        runs = job_steps.groupby(key, sort=False).agg(run_key=("run_key", "min"), run_date=("run_date", "min"))
        runs = runs.reset_index()
    else:  # one row per run already (the fleet stage's stored runs)
        runs = job_steps[[*key, "run_key", "run_date"]]
    return runs.sort_values(["job_name", "run_key", "job_id", "attempt"], kind="stable").reset_index(drop=True)


def baselines(runs: pd.DataFrame, baseline_runs: int) -> dict[tuple[str, int], list[tuple[str, int]]]:
    """``{(job_id, attempt): [(job_id, attempt) of its baseline runs, oldest first]}`` over :func:`run_sequence`
    rows: the previous ``baseline_runs`` runs of the same job name."""
    out = {}
    for _, g in runs.groupby("job_name", sort=False):
        keys = [(str(j), int(a)) for j, a in zip(g["job_id"], g["attempt"])]
        for i, k in enumerate(keys):
            out[k] = keys[max(0, i - baseline_runs) : i]
    return out


#: The ``regressions`` columns :func:`dates_to_compare` reads of the rows written last.
COMPARED_COLUMNS = ("job_id", "attempt", "date", "run_index", "baseline_runs")


def runs_after(runs: pd.DataFrame, before: pd.DataFrame | None, touched) -> pd.DataFrame:
    """The runs whose ``regressions`` rows a change of the ``touched`` runs (``(job_id, attempt)`` reduced again or
    gone) can alter: in each job name holding a touched run now or before, every run from the first touched one on
    (``run_key`` order) — a run's place, baselines and rows depend only on its own rows and the runs before it.

    Args:
        runs, before: :func:`run_sequence` rows of every run now and at the last fleet run (``None``: none).

    Returns:
        ``runs`` and ``before`` rows of those runs (``job_name, job_id, attempt, run_key, run_date``).
    """
    keys = {(str(j), int(a)) for j, a in touched}
    frames = [f for f in (runs, before) if f is not None and len(f)]
    if not frames or not keys:
        return runs.iloc[0:0]
    both = pd.concat(frames, ignore_index=True)
    mine = [(str(j), int(a)) in keys for j, a in zip(both["job_id"], both["attempt"])]
    first = both[np.asarray(mine, dtype=bool)].groupby("job_name")["run_key"].min()
    start = both["job_name"].map(first)
    return both[(start.notna() & (both["run_key"] >= start)).to_numpy(dtype=bool)]


def dates_to_compare(
    runs: pd.DataFrame,
    previous: pd.DataFrame,
    changed_jobs,
    baseline_runs: int = BASELINE_RUNS,
    checked=None,
) -> set[str]:
    """The run dates whose ``regressions`` rows must be computed again (every run of such a date: one family).

    A date is stale when one of its runs is new, gone, of a job in ``changed_jobs`` (its rows changed), at another
    place in its job name's runs (``run_index``), or compared with other baseline runs than in ``previous``, or with
    a baseline run of a changed job.

    Args:
        runs: :func:`run_sequence` of every run now; previous: the ``regressions`` rows written last time
            (:data:`COMPARED_COLUMNS` suffice).
        changed_jobs: job ids whose rows changed since; baseline_runs: as :func:`find_regressions`.
        checked: only these runs (``(job_id, attempt)``: :func:`runs_after` of the changed jobs' runs) can be
            stale; ``previous`` need then hold only the rows of their dates (now and before). Default every run.

    Returns:
        The dates (``run_date`` now, ``date`` in ``previous``) to compare again.
    """
    changed = {str(j) for j in changed_jobs}
    old = {
        (str(r.job_id), int(r.attempt)): (str(r.date), int(r.run_index), [str(b) for b in r.baseline_runs])
        for r in previous.drop_duplicates(["job_id", "attempt"]).itertuples()
    }
    index = runs.groupby("job_name", sort=False).cumcount()
    date_of, index_of = {}, {}
    for j, a, d, i in zip(runs["job_id"], runs["attempt"], runs["run_date"], index):
        date_of[(str(j), int(a))], index_of[(str(j), int(a))] = str(d), int(i)
    out = set()
    wanted = None if checked is None else {(str(j), int(a)) for j, a in checked}
    for k, base in baselines(runs, baseline_runs).items():
        if wanted is not None and k not in wanted:
            continue
        was = old.get(k)
        if (
            was is None
            or k[0] in changed
            or any(b[0] in changed for b in base)
            or was != (date_of[k], index_of[k], [f"{j}#{a}" for j, a in base])
        ):
            out.add(date_of[k])
            if was is not None:
                out.add(was[0])
    out |= {was[0] for k, was in old.items() if k not in date_of}  # gone: its date's family lost a run
    return out


def find_regressions(
    job_steps: pd.DataFrame,
    baseline_runs: int = BASELINE_RUNS,
    threshold_pct: float = THRESHOLD_PCT,
    threshold_pp: float = THRESHOLD_PP,
    alpha: float = DEFAULT_ALPHA,
    dates=None,
    sequence: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Compare every run of one or more job names with its previous runs.

    Args:
        job_steps: one row per job step with :data:`INPUT_COLUMNS` (times in ns; ``run_key`` orders
            runs; ``run_date`` is the run's first capture date).
        baseline_runs: how many previous runs form the baseline (≥ 1).
        threshold_pct: relative change of a time metric that counts (%).
        threshold_pp: change of a percentage metric that counts (percentage points).
        alpha: significance level on the Benjamini–Hochberg adjusted p (the intervals are at 1 − 2·alpha).
        dates: compare only the runs of these ``run_date`` values (default every run); the others serve as
            baselines. The rows are the same as those of a call over every run: a family is one date's runs.
        sequence: :func:`run_sequence` of every run (default: of ``job_steps``); then ``job_steps`` need hold only
            the runs compared and their baselines.

    Returns:
        ``regressions`` rows (:data:`OUTPUT_COLUMNS`, schema ``schemas.REGRESSIONS``), one per compared run and
        metric; ``p_adjusted`` spans the tests of the runs of one ``date`` (the family of the Benjamini–Hochberg
        correction: one capture day's runs, every job name).

    Raises:
        ValueError: ``baseline_runs`` < 1 or a missing input column.
    """
    raw = compare_runs(job_steps, baseline_runs, alpha, dates, sequence)
    return decide(raw, threshold_pct, threshold_pp, alpha)


#: What :func:`compare_runs` adds to :data:`OUTPUT_COLUMNS` for :func:`decide` (private: not written).
DECIDE_COLUMNS = ["_base_noisy", "_first"]


def compare_runs(
    job_steps: pd.DataFrame,
    baseline_runs: int = BASELINE_RUNS,
    alpha: float = DEFAULT_ALPHA,
    dates=None,
    sequence: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The tests of :func:`find_regressions` before the correction: one row per compared run and metric with its
    statistics, raw ``p_value`` and interval (at 1 − 2·``alpha``); ``p_adjusted``, ``verdict``, ``reason`` and
    ``summary`` null (:func:`decide` fills them), plus :data:`DECIDE_COLUMNS`. Rows of different job names are
    independent: the fleet stage computes them per job name on Spark's executors (``applyInPandas``).

    Raises:
        ValueError: ``baseline_runs`` < 1 or a missing input column.
    """
    if baseline_runs < 1:
        raise ValueError(f"baseline_runs must be >= 1, got {baseline_runs}")
    missing = [c for c in INPUT_COLUMNS if c not in job_steps.columns]
    if missing:
        raise ValueError(f"job steps lack columns {missing}")
    confidence = 1.0 - 2.0 * alpha
    rows = []
    wanted = None if dates is None else {str(d) for d in dates}
    sequences = dict(tuple(sequence.groupby("job_name", sort=False))) if sequence is not None else {}
    for name, g in job_steps.groupby("job_name", sort=True):
        runs = (sequences[name] if name in sequences else run_sequence(g)).drop(columns="job_name")
        compared = runs if wanted is None else runs[runs["run_date"].astype(str).isin(wanted)]
        if not len(compared):
            continue
        base_of = baselines(runs.assign(job_name=name), baseline_runs)
        needed = {(str(r.job_id), int(r.attempt)) for r in compared.itertuples()}
        needed |= {b for k in list(needed) for b in base_of[k]}
        by_run, all_steps, dropped = {}, {}, {}
        for (job, attempt), s in g.groupby(["job_id", "attempt"], sort=False):
            k = (str(job), int(attempt))
            if k not in needed:
                continue
            keep = drop_outliers(s["step_time_ns"].to_numpy(dtype=float))
            by_run[k], all_steps[k], dropped[k] = s[keep], s, int((~keep).sum())
        for i, r in enumerate(runs.itertuples()):
            if (str(r.job_id), int(r.attempt)) not in needed or (wanted is not None and str(r.run_date) not in wanted):
                continue
            cur = by_run[(str(r.job_id), int(r.attempt))]
            base_ids = base_of[(str(r.job_id), int(r.attempt))]
            base = pd.concat([by_run[k] for k in base_ids]) if base_ids else cur.iloc[0:0]
            # the test and the interval see every step (see the module docstring)
            cur_all = all_steps[(str(r.job_id), int(r.attempt))]
            base_all = pd.concat([all_steps[k] for k in base_ids]) if base_ids else cur_all.iloc[0:0]
            noisy = is_noisy(cur["step_time_ns"].to_numpy(dtype=float))
            base_noisy = any(is_noisy(by_run[k]["step_time_ns"].to_numpy(dtype=float)) for k in base_ids)
            for metric in METRICS:
                value, baseline = _statistic(metric, cur), _statistic(metric, base)
                p = _p_value(_samples(metric, cur), _samples(metric, base))
                a, b = _samples(metric, cur_all), _samples(metric, base_all)
                if p is not None:
                    p = _p_value(a, b)
                delta = value - baseline if value is not None and baseline is not None else None
                change = delta / baseline * 100.0 if delta is not None and baseline else None
                est = lo = hi = None
                if p is not None:
                    if metric.startswith("step_time"):
                        a, b = a[a > 0], b[b > 0]
                        if len(a) >= MIN_STEPS and len(b) >= MIN_STEPS:
                            hl = hodges_lehmann(np.log(a), np.log(b), confidence)
                            est, lo, hi = (None if x is None else math.expm1(x) * 100.0 for x in hl)
                    else:
                        est, lo, hi = hodges_lehmann(a, b, confidence)
                rows.append(
                    {
                        "job_name": name,
                        "job_id": r.job_id,
                        "attempt": int(r.attempt),
                        "date": r.run_date,
                        "run_index": i,
                        "metric": metric,
                        "value": value,
                        "baseline": baseline,
                        "change_pct": change,
                        "delta": delta,
                        "change_est_pct": est,
                        "change_ci_low_pct": lo,
                        "change_ci_high_pct": hi,
                        "p_value": p,
                        "p_adjusted": None,
                        "verdict": None,
                        "reason": None,
                        "summary": None,
                        "noisy": noisy,
                        "baseline_runs": [f"{j}#{int(t)}" for j, t in base_ids],
                        "n_steps": int(len(cur)),
                        "n_baseline_steps": int(len(base)),
                        "n_dropped": dropped[(str(r.job_id), int(r.attempt))],
                        "_base_noisy": base_noisy,
                        "_first": not base_ids,
                    }
                )
    return pd.DataFrame(rows, columns=[*OUTPUT_COLUMNS, *DECIDE_COLUMNS])


def decide(
    compared: pd.DataFrame,
    threshold_pct: float = THRESHOLD_PCT,
    threshold_pp: float = THRESHOLD_PP,
    alpha: float = DEFAULT_ALPHA,
) -> pd.DataFrame:
    """:func:`compare_runs` rows (of every job name: a family spans one capture date's runs) with ``p_adjusted``
    (Benjamini–Hochberg per ``date``), ``verdict``, ``reason`` and ``summary``: ``regressions`` rows
    (:data:`OUTPUT_COLUMNS`) in the order given."""
    confidence = 1.0 - 2.0 * alpha
    out = compared.reset_index(drop=True)
    if not len(out):
        return out.reindex(columns=OUTPUT_COLUMNS)
    family = out["date"].astype(str)  # one capture day's runs: a family
    out["p_adjusted"] = out.groupby(family, sort=False)["p_value"].transform(lambda p: bh_adjust(p.to_numpy(float)))
    decided = [
        _verdict(r, threshold_pct, threshold_pp, alpha, 100.0 * confidence) for r in out.to_dict(orient="records")
    ]
    out["verdict"] = [v for v, _ in decided]
    out["reason"] = [w for _, w in decided]
    out["summary"] = [
        in_words(
            r, threshold_pp if r["metric"] in ("idle_pct", "exposed_comm_pct") else threshold_pct, r["_base_noisy"]
        )
        for r in out.to_dict(orient="records")
    ]
    return out[OUTPUT_COLUMNS]


def _fmt(v: float, pp: bool) -> str:
    """``+1,037 %``, ``+4.2 %``, ``-0.8 pp`` (never ``-0.0``)."""
    v = round(v, 1) + 0.0
    return f"{v:+.1f} pp" if pp else f"{v:+,.0f} %" if abs(v) >= 10 else f"{v:+.1f} %"


def _value(v: float, metric: str) -> str:
    """A metric's value in its display unit: ms for step times, % for percentages."""
    if metric.startswith("step_time"):
        v = v / 1e6
        return f"{v:,.2f} ms" if abs(v) < 10 else f"{v:,.1f} ms" if abs(v) < 100 else f"{v:,.0f} ms"
    return f"{v:.1f} %"


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def steps_to_decide(lo: float, hi: float, threshold: float, pp: bool, n_steps: int) -> int | None:
    """Steps per run at which an interval ``[lo, hi]`` (% change, or percentage points when ``pp``) would decide
    against ± ``threshold``: inside it (``unchanged``) when its centre is inside, else clear of it. The interval's
    half-width shrinks as 1/√steps on both sides (normal approximation of the Hodges–Lehmann interval, Hollander &
    Wolfe §4.3), so the steps scale by (half-width / room)²; step times on the log scale. None when the centre sits
    within 5 % of the threshold (more steps alone hardly decide)."""
    if pp:
        lo_, hi_, up, down = lo, hi, threshold, -threshold
    else:
        lo_, hi_ = math.log1p(lo / 100.0), math.log1p(hi / 100.0)
        up, down = math.log1p(threshold / 100.0), math.log1p(-min(threshold, 99.0) / 100.0)
    c, hw = (lo_ + hi_) / 2.0, (hi_ - lo_) / 2.0
    room = min(up - c, c - down) if down < c < up else max(c - up, down - c)
    if room <= 0.05 * (up - down) / 2.0 or hw <= 0:
        return None
    return max(n_steps + 1, math.ceil(n_steps * (hw / room) ** 2))


def _min_steps_for_interval(level: float) -> int:
    """The fewest steps per side (n vs n) that give a Hodges–Lehmann interval at ``level`` %."""
    n = MIN_STEPS
    while n < 50 and _u_rank(n, n, level / 100.0) < 1:
        n += 1
    return n


def _decide_with(r: dict, lo: float, hi: float, thr: float, pp: bool, noisy: bool) -> str:
    """What would decide an inconclusive row, in words."""
    n = steps_to_decide(lo, hi, thr, pp, int(r["n_steps"]))
    if n is None:
        return "the change sits at the threshold: more steps alone will hardly decide"
    more = f"about {n:,} steps per run (now {int(r['n_steps'])}) would decide"
    return more + (", or a quieter host" if noisy else "")


def _verdict(r: dict, threshold_pct: float, threshold_pp: float, alpha: float, level: float) -> tuple[str, str | None]:
    """(verdict, reason) of one row (module docstring); an inconclusive reason ends with what would decide."""
    metric, delta, change, p, q = r["metric"], r["delta"], r["change_pct"], r["p_value"], r["p_adjusted"]
    if delta is None or _missing(p):
        if r["_first"]:
            return "no_baseline", "first run of its job name"
        return "no_baseline", f"fewer than {MIN_STEPS} steps on a side"
    pp = not metric.startswith("step_time")
    thr = threshold_pp if pp else threshold_pct
    moved = abs(delta) > threshold_pp if pp else (abs(change) > threshold_pct if change is not None else False)
    if moved and q is not None and q < alpha:
        return ("regression" if delta > 0 else "improvement"), None  # every metric here is lower-is-better
    lo, hi = r["change_ci_low_pct"], r["change_ci_high_pct"]
    bound = f"±{thr:g} {'pp' if pp else '%'}"
    if _missing(lo) or _missing(hi):
        n = _min_steps_for_interval(level)
        return (
            "inconclusive",
            f"too few steps: {r['n_steps']} vs {r['n_baseline_steps']} give no {level:.0f} % interval; "
            f"at least {n} steps on each side would",
        )
    if -thr <= lo and hi <= thr:
        return "unchanged", None
    noisy = bool(r["noisy"] or r["_base_noisy"])
    decide = _decide_with(r, lo, hi, thr, pp, noisy)
    if moved and lo > 0 or moved and hi < 0:
        return (
            "inconclusive",
            f"not significant after correcting for many tests (p {p:.2g}, adjusted {q:.2g}); {decide}",
        )
    if hi - lo > 2 * thr:
        if noisy:
            who = " and ".join(w for w, f in (("run", r["noisy"]), ("baseline", r["_base_noisy"])) if f)
            return (
                "inconclusive",
                f"too noisy ({who} p90/p50 > {NOISY_P90_P50:g}), interval wider than {bound}; {decide}",
            )
        return "inconclusive", f"too few steps: interval wider than {bound}; {decide}"
    return "inconclusive", f"the interval crosses {bound}; {decide}"


def in_words(r: dict, threshold: float, baseline_noisy: bool = False) -> str:
    """One ``regressions`` row in words — ``job step p50 4.26 → 48.4 ms, +1,037 % [−8 %, +1,300 %]:
    inconclusive — too noisy …; 8 vs 8 steps, noisy baseline`` — from its columns (the interval is the
    Hodges–Lehmann shift's; for the p90 row it is the shift of all steps, said so). ``threshold``: % for step
    times, percentage points for percentages."""
    metric = str(r["metric"])
    pp = not metric.startswith("step_time")
    label = METRIC_WORDS.get(metric, metric)
    v, b = r.get("value"), r.get("baseline")
    if r["verdict"] == "no_baseline" or _missing(b):
        now = f" {_value(v, metric)}" if not _missing(v) else ""
        return f"{label}{now}: no baseline — {r.get('reason') or 'no earlier run'}"
    moved = _fmt(r["delta"], True) if pp else _fmt(r["change_pct"], False) if not _missing(r["change_pct"]) else ""
    text = f"{label} {_value(b, metric)} → {_value(v, metric)}" + (f", {moved}" if moved else "")
    lo, hi = r.get("change_ci_low_pct"), r.get("change_ci_high_pct")
    if not _missing(lo) and not _missing(hi):
        ci = f"[{_fmt(lo, pp)}, {_fmt(hi, pp)}]"
        text += (
            f" (all steps shifted {_fmt(r['change_est_pct'], pp)} {ci})" if metric == "step_time_p90_ns" else f" {ci}"
        )
    verdict = str(r["verdict"])
    if verdict in ("regression", "improvement"):
        text += f": {verdict}, adjusted p {r['p_adjusted']:.2g}"
    elif verdict == "unchanged":
        text += f": unchanged, within ±{threshold:g} {'pp' if pp else '%'}"
    else:
        text += f": {verdict}" + (f" — {r['reason']}" if r.get("reason") else "")
    notes = [f"{int(r['n_steps'])} vs {int(r['n_baseline_steps'])} steps"]
    if r.get("noisy"):
        notes.append("noisy run")
    if baseline_noisy:
        notes.append("noisy baseline")
    if r.get("n_dropped"):
        notes.append(f"{int(r['n_dropped'])} outlier step(s) dropped")
    return text + "; " + ", ".join(notes)


def testing_in_words(regressions: pd.DataFrame, alpha: float = DEFAULT_ALPHA) -> str:
    """How many tests the rows hold and the false alarms to expect, in words: job names and runs compared,
    (run, metric) tests, runs flagged, and the expected false alarms among them — at most about ``alpha`` × flagged
    under the Benjamini–Hochberg false discovery rate of each day's family (Benjamini & Hochberg 1995) — against
    ``alpha`` × tests had each test been read alone with nothing changed. ``""`` when nothing was tested."""
    if regressions is None or not len(regressions) or "p_value" not in regressions.columns:
        return ""
    tested = regressions[regressions["p_value"].notna()]
    if not len(tested):
        return ""
    flagged = tested[tested["verdict"].isin(["regression", "improvement"])]
    names = tested["job_name"].nunique()
    runs = tested[["job_id", "attempt"]].drop_duplicates().shape[0]
    return (
        f"{names:,} job name(s), {runs:,} run(s) compared, {len(tested):,} tests (run × metric); "
        f"{len(flagged):,} flagged, of which at most about {alpha * len(flagged):.2g} expected to be false alarms "
        f"(Benjamini-Hochberg false discovery rate {alpha:g} over each capture day's runs); read one by one at "
        f"p < {alpha:g}, "
        f"{alpha * len(tested):.2g} false alarms would be expected even if nothing had changed."
    )
