"""The fleet tables kept up to date from per-run-date partials (jobs/fleet/partials.py): the merged ``all`` rows
equal the exact ones while the sketches hold every step, stay within the stated rank error beyond, and an
update of a few runs equals making everything again."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.fleet.partials import (
    MERGED,
    RANK_ERROR,
    WIDE,
    changed_kernels,
    changed_stats,
    combine_kernels,
    combine_stats,
    kernel_partials,
    made_again,
    merge_stats,
    stats_partials,
)
from jobs.fleet.stats import fleet_kernels, fleet_stats

MS = 1_000_000
DAYS = [f"2026-11-{d:02d}" for d in range(1, 6)]


def _fleet(n_runs: int, steps: int, seed: int = 0, scale: dict | None = None):
    """Job steps and job kernels of ``n_runs`` runs (two job names, two hardware kinds) over :data:`DAYS`; a run
    on the last days spans two capture dates; ``scale``: ``{job_id: factor}`` on its step times."""
    rng = np.random.default_rng(seed)
    js, jk = [], []
    for r in range(n_runs):
        job, day = f"j{r:03d}", r % len(DAYS)
        meta = dict(
            job_id=job,
            attempt=0,
            job_name=f"name-{r % 2}",
            job=f"{job}#0",
            model="m" if r % 3 else None,
            hardware="H100" if r % 4 else "B200",
            torch_version="2.13.0",
            run_key=f"{DAYS[day]}T{r:04d}",
            run_date=DAYS[day],
            world_size=2,
        )
        t = rng.lognormal(0, 0.3, steps) * 100 * MS * (scale or {}).get(job, 1.0)
        for s in range(steps):
            date = DAYS[min(day + (s >= steps // 2 and day >= 3), len(DAYS) - 1)]
            js.append(
                dict(
                    meta,
                    step=s,
                    date=date,
                    step_time_ns=int(t[s]),
                    rank_step_time_ns=int(2 * t[s]),
                    kernel_time_ns=int(1.8 * t[s]) if r % 5 else None,
                    idle_time_ns=int(0.2 * t[s]),
                    compute_time_ns=int(1.5 * t[s]),
                    exposed_comm_ns=int(0.1 * t[s]),
                    cpu_bound_time_ns=0,
                    dataloader_time_ns=int(0.01 * t[s]),
                    n_rank_steps=2,
                    ranks=[0, 1] if s else [0],
                    window="step",
                )
            )
        for k in range(12):
            jk.append(dict(meta, date=DAYS[day], name=f"k{k}", kernel_type="COMPUTATION", n=3, total_ns=(k + r) * MS))
    return pd.DataFrame(js), pd.DataFrame(jk)


def _sorted(df: pd.DataFrame | pa.Table) -> pd.DataFrame:
    if isinstance(df, pa.Table):  # integers as the pandas functions type them
        df = df.to_pandas(types_mapper=lambda t: pd.Int64Dtype() if pa.types.is_integer(t) else None)
    key = ["dimension", "value", "date", *(["kernel_rank"] if "kernel_rank" in df else [])]
    return df.sort_values(key).reset_index(drop=True)


def test_merged_rows_equal_the_exact_ones_while_the_sketch_holds_every_step():
    js, jk = _fleet(12, 8)
    exact = fleet_stats(js)
    merged = changed_stats(js, stats_partials(js))
    pd.testing.assert_frame_equal(_sorted(merged), _sorted(exact), check_exact=False, rtol=1e-12)
    assert set(exact["dimension"]) >= {*WIDE, "job"} and (exact["date"] == "all").sum() > 12
    pd.testing.assert_frame_equal(_sorted(changed_kernels(jk, kernel_partials(jk))), _sorted(fleet_kernels(jk)))


def test_merged_percentiles_stay_within_the_rank_error_beyond():
    js, _ = _fleet(40, 60, seed=1)  # 2,400 steps: the fleet's sketch compacts
    merged = merge_stats(stats_partials(js)).set_index(["dimension", "value"])
    exact = fleet_stats(js, dated=False)
    exact = exact[exact["dimension"] != "job"].set_index(["dimension", "value"])
    _assert_merged_as_exact(merged, exact, js)


def _assert_merged_as_exact(merged: pd.DataFrame, exact: pd.DataFrame, js: pd.DataFrame) -> None:
    """``merged`` wide ``all`` rows (indexed by dimension, value) against ``exact`` ones: the same groups, counts
    equal, sums and percentages equal to rounding, each step-time percentile within the rank error of ``js``'s."""
    assert sorted(merged.index) == sorted(exact.index)
    for col in ("n_runs", "n_ranks", "n_steps", "n_rank_steps"):
        assert merged[col].tolist() == exact.loc[merged.index, col].tolist(), col
    for col in ("step_time_mean_ns", "idle_pct", "compute_pct", "exposed_comm_pct", "dataloader_pct"):
        assert np.allclose(merged[col], exact.loc[merged.index, col], rtol=1e-12), col
    for (dim, value), row in merged.iterrows():
        group = js if dim == "fleet" else js[js[dim].astype(object).fillna("(none)").astype(str) == value]
        times = np.sort(group["step_time_ns"].to_numpy(dtype=float))
        for q, col in ((0.5, "step_time_p50_ns"), (0.9, "step_time_p90_ns"), (0.99, "step_time_p99_ns")):
            rank = np.searchsorted(times, row[col], side="right") / len(times)
            assert abs(rank - q) <= RANK_ERROR + 1 / len(times), (dim, value, col, rank)


def test_a_day_added_to_the_merged_rows_equals_merging_every_run_date():
    """A daily run adds the new run date's partials to each group's merged row: the same counts, sums and kernel
    rows as merging every run date's partials; the percentiles exact while the sketch holds every step, within
    the rank error beyond (the fleet group's sketch compacts here)."""
    js, jk = _fleet(40, 60, seed=2)
    last = js["run_date"] == DAYS[-1]
    merged = combine_stats(stats_partials(js[~last]))
    assert set(merged["run_date"]) == {MERGED} and not merged.duplicated(["dimension", "value"]).any()
    running = merge_stats(pd.concat([merged, stats_partials(js[last])], ignore_index=True))
    every = merge_stats(stats_partials(js))
    _assert_merged_as_exact(*(d.set_index(["dimension", "value"]) for d in (running, every)), js)
    kl = jk["run_date"] == DAYS[-1]
    added = pa.concat_tables([combine_kernels(kernel_partials(jk[~kl])), combine_kernels(kernel_partials(jk[kl]))])
    key = [("dimension", "ascending"), ("value", "ascending"), ("name", "ascending")]
    assert combine_kernels(added).sort_by(key).equals(combine_kernels(kernel_partials(jk)).sort_by(key))


def test_an_update_of_a_few_runs_equals_making_everything_again():
    """Run j003 re-ingested slower, j007 gone, j012 new: the rows of their dates and runs are made again from the
    jobs on those dates, the other rows kept — equal to a rebuild over the new fleet."""
    old_js, old_jk = _fleet(12, 8)
    new_js, new_jk = _fleet(13, 8, scale={"j003": 3.0})
    new_js, new_jk = (d[d["job_id"] != "j007"] for d in (new_js, new_jk))
    full = {
        "stats": changed_stats(new_js, stats_partials(new_js)),
        "kernels": changed_kernels(new_jk, kernel_partials(new_jk)),
    }
    touched_jobs = {"j003", "j007", "j012"}
    rows = pd.concat([d[d["job_id"].isin(touched_jobs)] for d in (old_js, new_js, old_jk, new_jk)])
    dates, run_dates, runs = set(rows["date"]), set(rows["run_date"]), set(rows["job"])
    assert len(dates) < len(DAYS)  # the update leaves some dates alone
    on = new_js["date"].isin(dates) | new_js["run_date"].isin(run_dates)
    read = set(new_js["job_id"][on]) | set(new_jk["job_id"][new_jk["date"].isin(dates)])
    js, jk = (d[d["job_id"].isin(read)] for d in (new_js, new_jk))

    def again(old_partials, frame, make):
        kept = old_partials[~old_partials["run_date"].isin(run_dates)]
        return pd.concat([kept, make(frame[frame["run_date"].isin(run_dates)])], ignore_index=True)

    sp = again(stats_partials(old_js), js, stats_partials)
    kp = again(kernel_partials(old_jk), jk, kernel_partials)
    prev_stats = changed_stats(old_js, stats_partials(old_js))
    prev_kernels = changed_kernels(old_jk, kernel_partials(old_jk))
    # what a keyed write leaves: the stored rows made_again does not name, and the rows made again
    again = ~pq.filters_to_expression(made_again(dates, runs))
    inc_stats = pa.concat_tables([prev_stats.filter(again), changed_stats(js, sp, dates, runs)])
    inc_kernels = pa.concat_tables([prev_kernels.filter(again), changed_kernels(jk, kp, dates, runs)])
    pd.testing.assert_frame_equal(_sorted(inc_stats), _sorted(full["stats"]))
    pd.testing.assert_frame_equal(_sorted(inc_kernels), _sorted(full["kernels"]))
    inc_stats, prev_stats = _sorted(inc_stats), _sorted(prev_stats)
    j3 = inc_stats[(inc_stats["value"] == "j003#0") & (inc_stats["date"] == "all")]["step_time_p50_ns"].iloc[0]
    was = prev_stats[(prev_stats["value"] == "j003#0") & (prev_stats["date"] == "all")]["step_time_p50_ns"].iloc[0]
    assert abs(j3 / was - 3.0) < 1e-6 and "j007#0" not in set(inc_stats["value"])
