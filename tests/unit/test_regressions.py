"""Regressions against previous runs of the same job name (jobs/fleet/regressions.py), on job steps
built so the expected verdicts follow from the construction."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from jobs.fleet.regressions import METRICS, bh_adjust, drop_outliers, find_regressions, is_noisy, steps_to_decide

MS = 1_000_000


def _run(job_id: str, key: str, step_ms, idle_frac=0.1, exposed_frac=0.05, name="nightly"):
    rows = []
    for i, t in enumerate(step_ms):
        st = int(t * MS)
        rows.append(
            {
                "job_name": name,
                "job_id": job_id,
                "attempt": 0,
                "run_key": key,
                "run_date": key[:10],
                "step": i,
                "step_time_ns": st,
                "rank_step_time_ns": 2 * st,
                "kernel_time_ns": 2 * st,
                "idle_time_ns": int(2 * st * idle_frac),
                "exposed_comm_ns": int(2 * st * exposed_frac),
            }
        )
    return rows


def _jitter(center, n=10, seed=0):
    rng = np.random.default_rng(seed)
    return list(center * (1 + rng.uniform(-0.01, 0.01, n)))


def _frame(*runs):
    return pd.DataFrame([r for run in runs for r in run])


def _verdicts(out, job):
    r = out[out["job_id"] == job]
    return dict(zip(r["metric"], r["verdict"]))


def test_step_time_regression_is_found_against_previous_runs():
    out = find_regressions(
        _frame(
            _run("r0", "2026-11-01T00:00:00Z", _jitter(100, seed=0)),
            _run("r1", "2026-11-02T00:00:00Z", _jitter(100, seed=1)),
            _run("r2", "2026-11-03T00:00:00Z", _jitter(130, seed=2)),  # 30 % slower
        )
    )
    assert set(out["metric"]) == set(METRICS) and len(out) == 3 * len(METRICS)
    assert set(_verdicts(out, "r0").values()) == {"no_baseline"}
    assert _verdicts(out, "r1")["step_time_p50_ns"] == "unchanged"
    r2 = out[(out["job_id"] == "r2") & (out["metric"] == "step_time_p50_ns")].iloc[0]
    assert r2["verdict"] == "regression"
    assert r2["baseline_runs"] == ["r0#0", "r1#0"] and r2["n_baseline_steps"] == 20 and r2["n_steps"] == 10
    assert r2["change_pct"] == pytest.approx(30, abs=2) and r2["p_value"] < 1e-4
    assert r2["run_index"] == 2
    # same fractions of the step: the percentages did not move
    assert _verdicts(out, "r2")["idle_pct"] == "unchanged"


def test_improvement_and_idle_regression():
    out = find_regressions(
        _frame(
            _run("a", "2026-11-01", _jitter(100, seed=3), idle_frac=0.10),
            _run("b", "2026-11-02", _jitter(80, seed=4), idle_frac=0.25),
        )
    )
    v = _verdicts(out, "b")
    assert v["step_time_p50_ns"] == "improvement" and v["step_time_p90_ns"] == "improvement"
    assert v["idle_pct"] == "regression"
    idle = out[(out["job_id"] == "b") & (out["metric"] == "idle_pct")].iloc[0]
    assert idle["value"] == pytest.approx(25, abs=0.01) and idle["delta"] == pytest.approx(15, abs=0.01)


def test_small_change_or_few_steps_is_not_a_regression():
    out = find_regressions(
        _frame(
            _run("a", "2026-11-01", _jitter(100, seed=5)),
            _run("b", "2026-11-02", _jitter(103, seed=6)),  # 3 % < 5 % threshold, even if significant
            _run("c", "2026-11-03", [200, 210]),  # 2 steps: too few for a test
        )
    )
    assert _verdicts(out, "b")["step_time_p50_ns"] == "unchanged"
    c = out[(out["job_id"] == "c") & (out["metric"] == "step_time_p50_ns")].iloc[0]
    assert c["verdict"] == "no_baseline" and pd.isna(c["p_value"]) and c["value"] == pytest.approx(205 * MS)


def test_baseline_is_the_previous_runs_in_order_and_names_are_separate():
    runs = [_run(f"r{i}", f"2026-11-{i + 1:02d}", _jitter(100, seed=i)) for i in range(8)]
    other = _run("x0", "2026-10-01", _jitter(500, seed=99), name="other-job")
    # rows shuffled: order comes from run_key, not from the input order
    df = _frame(*runs, other).sample(frac=1, random_state=0)
    out = find_regressions(df, baseline_runs=3)
    r7 = out[(out["job_id"] == "r7")].iloc[0]
    assert r7["baseline_runs"] == ["r4#0", "r5#0", "r6#0"] and r7["run_index"] == 7
    assert set(_verdicts(out, "x0").values()) == {"no_baseline"}  # its own name: no baseline


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="baseline_runs"):
        find_regressions(_frame(_run("a", "k", [1, 2, 3])), baseline_runs=0)
    with pytest.raises(ValueError, match="lack columns"):
        find_regressions(pd.DataFrame({"job_name": ["a"]}))


def _p50(out, job):
    return out[(out["job_id"] == job) & (out["metric"] == "step_time_p50_ns")].iloc[0]


BUSY_BASELINE = [15.05, 66.53, 62.58, 3.96, 4.42, 4.08, 4.10, 3.96]
BUSY_SLOW = [68.48, 52.65, 46.20, 50.67, 28.05, 28.91, 61.59, 33.19]


def test_busy_baseline_is_never_read_as_unchanged():
    # p50 +1,037 % but MWU p = 0.065 on 8 vs 8 steps: failing to reject is no evidence of "no change"
    out = find_regressions(_frame(_run("base", "2026-11-01", BUSY_BASELINE), _run("slow", "2026-11-02", BUSY_SLOW)))
    r = _p50(out, "slow")
    assert r["change_pct"] == pytest.approx(1037, abs=5) and r["p_value"] == pytest.approx(0.065, abs=0.005)
    assert r["verdict"] in ("regression", "inconclusive") and r["verdict"] != "unchanged"
    assert r["verdict"] == "inconclusive" and "too noisy" in r["reason"] and "baseline" in r["reason"]
    assert r["change_ci_low_pct"] < 0 < r["change_est_pct"] < r["change_ci_high_pct"]
    assert r["n_steps"] == 8 and r["n_baseline_steps"] == 8 and r["n_dropped"] == 0
    assert not r["noisy"]  # the slow run itself is even (p90/p50 < 1.5); its baseline is not
    assert _p50(out, "base")["reason"] == "first run of its job name"


def test_clean_doubling_on_8_steps_is_a_regression_with_its_interval():
    out = find_regressions(
        _frame(_run("a", "2026-11-01", _jitter(50, n=8, seed=1)), _run("b", "2026-11-02", _jitter(100, n=8, seed=2)))
    )
    r = _p50(out, "b")
    assert r["verdict"] == "regression" and pd.isna(r["reason"])
    assert r["change_ci_low_pct"] > 90 and r["change_ci_high_pct"] < 110
    assert r["change_ci_low_pct"] <= r["change_est_pct"] <= r["change_ci_high_pct"]
    assert r["change_est_pct"] == pytest.approx(100, abs=5)


def test_same_distribution_is_unchanged_only_when_the_interval_is_inside_the_threshold():
    rng = np.random.default_rng(7)
    tight = [list(100 * np.exp(rng.normal(0, 0.01, 20))) for _ in range(2)]
    loose = [list(100 * np.exp(rng.normal(0, 0.2, 8))) for _ in range(2)]
    out = find_regressions(
        _frame(
            _run("t0", "2026-11-01", tight[0], name="tight"),
            _run("t1", "2026-11-02", tight[1], name="tight"),
            _run("l0", "2026-11-01", loose[0], name="loose"),
            _run("l1", "2026-11-02", loose[1], name="loose"),
        )
    )
    t, lo = _p50(out, "t1"), _p50(out, "l1")
    assert t["verdict"] == "unchanged" and -5 <= t["change_ci_low_pct"] and t["change_ci_high_pct"] <= 5
    assert lo["verdict"] == "inconclusive" and (lo["change_ci_low_pct"] < -5 or lo["change_ci_high_pct"] > 5)
    assert "too few steps" in lo["reason"] or "more steps would decide" in lo["reason"]
    for x in out[out["verdict"] == "unchanged"].itertuples():  # unchanged always means a tight interval
        thr = 5 if x.metric.startswith("step_time") else 2
        assert -thr <= x.change_ci_low_pct and x.change_ci_high_pct <= thr


def test_benjamini_hochberg_matches_a_hand_computation():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): ×4/1, ×4/2, ×4/3, ×4/4 = 0.02, 0.02, 0.04, 0.04, then cumulative
    # minimum from the top: 0.02, 0.02, 0.04, 0.04
    adj = bh_adjust(p)
    assert adj[4] == pytest.approx(0.02) and adj[0] == pytest.approx(0.02)
    assert adj[2] == pytest.approx(0.04) and adj[1] == pytest.approx(0.04) and np.isnan(adj[3])
    assert bh_adjust(np.array([0.9, 0.8])) == pytest.approx([0.9, 0.9])


def test_p_adjusted_spans_the_job_names_of_one_day_and_decides():
    out = find_regressions(
        _frame(
            _run("a", "2026-11-01", _jitter(100, seed=3)),
            _run("b", "2026-11-02", _jitter(130, seed=4)),
            _run("x", "2026-11-01", _jitter(100, seed=5), name="other"),
            _run("y", "2026-11-02", _jitter(100, seed=6), name="other"),
        )
    )
    tested = out[out["p_value"].notna()]
    assert tested["p_adjusted"].to_numpy() == pytest.approx(bh_adjust(tested["p_value"].to_numpy()))
    assert (tested["p_adjusted"] >= tested["p_value"] - 1e-12).all()
    assert _p50(out, "b")["verdict"] == "regression" and _p50(out, "b")["p_adjusted"] < 0.01


def test_outlier_rule_drops_slow_warmup_steps_but_never_more_than_a_quarter():
    steps = np.array([900.0, 100, 101, 99, 100, 102, 98, 100, 101, 100])  # warm-up step 0
    keep = drop_outliers(steps)
    assert not keep[0] and keep[1:].all()
    assert drop_outliers(steps[:7]).all()  # fewer than 8 steps: nothing dropped
    many = np.array([100.0] * 6 + [1000.0] * 4 + [100.0] * 2)  # 4 far steps of 12: at most 3 go, slowest first
    assert (~drop_outliers(many)).sum() <= 12 // 4
    out = find_regressions(
        _frame(_run("a", "2026-11-01", _jitter(100, seed=1)), _run("b", "2026-11-02", [900, *_jitter(100, n=9)]))
    )
    b = _p50(out, "b")
    assert b["n_dropped"] == 1 and b["n_steps"] == 9 and b["verdict"] == "unchanged"
    assert is_noisy(np.array(BUSY_BASELINE)) and not is_noisy(np.array(_jitter(100)))


def test_report_shows_the_interval_and_the_inconclusive_reason():
    from jobs.publish.report.fleet_tables import _interval, regressions_section

    assert _interval(-3.14, 8.0, "step_time_p50_ns") == "-3.1 … +8.0 %" and _interval(None, 1, "idle_pct") == "—"
    assert _interval(-0.5, 0.3, "idle_pct") == "-0.5 … +0.3 pp"
    out = find_regressions(_frame(_run("base", "2026-11-01", BUSY_BASELINE), _run("slow", "2026-11-02", BUSY_SLOW)))
    sec = regressions_section(out)
    text = " ".join(sec.paragraphs)
    assert "Inconclusive step time (1 run(s)): slow#0: job step p50 4.26 ms → 48.4 ms, +1,037 % [" in text
    assert "too noisy" in text and "noisy baseline" in text
    # how many tests the fleet run made and the false alarms to expect
    assert "1 job name(s), 1 run(s) compared, 4 tests (run × metric); 0 flagged" in text


def test_every_row_says_its_verdict_in_words_with_what_would_decide():
    out = find_regressions(_frame(_run("base", "2026-11-01", BUSY_BASELINE), _run("slow", "2026-11-02", BUSY_SLOW)))
    slow = _p50(out, "slow")
    # the busy case: change, interval, verdict, reason with a remedy, steps, noisy baseline
    assert slow["summary"].startswith("job step p50 4.26 ms → 48.4 ms, +1,037 % [")
    assert ": inconclusive — too noisy (baseline p90/p50 > 1.5)" in slow["summary"]
    assert re.search(r"about \d+ steps per run \(now 8\) would decide, or a quieter host", slow["reason"])
    assert slow["summary"].endswith("; 8 vs 8 steps, noisy baseline")
    assert _p50(out, "base")["summary"] == "job step p50 4.26 ms: no baseline — first run of its job name"
    p90 = out[(out["job_id"] == "slow") & (out["metric"] == "step_time_p90_ns")].iloc[0]
    assert "(all steps shifted +" in p90["summary"]  # the p90 row says its interval is the whole shift's
    clean = find_regressions(
        _frame(_run("a", "2026-11-01", _jitter(50, n=8, seed=1)), _run("b", "2026-11-02", _jitter(100, n=8, seed=2)))
    )
    b = _p50(clean, "b")
    assert re.fullmatch(
        r"job step p50 50\.0 ms → 99\.\d ms, \+\d\d % \[\+\d\d %, \+1\d\d %\]: regression, adjusted p [\d.e-]+; "
        r"8 vs 8 steps",
        b["summary"],
    ), b["summary"]
    idle = clean[(clean["job_id"] == "b") & (clean["metric"] == "idle_pct")].iloc[0]
    assert idle["summary"].endswith(": unchanged, within ±2 pp; 8 vs 8 steps") and "-0.0" not in idle["summary"]


def test_steps_to_decide_scales_with_the_square_of_the_interval():
    # ×/÷ 1.2 around 0 against ±5 %: on the log scale the half-width must shrink ×3.7 → ≈ 14× the steps
    n = steps_to_decide(100 * (1 / 1.2 - 1), 20.0, 5.0, False, 8)
    assert 8 * 13 < n < 8 * 15
    assert steps_to_decide(-1.0, 3.0, 2.0, True, 10) == 10 * 4  # pp: centre 1, room 1, half-width 2 → ×4
    assert steps_to_decide(0.0, 10.0, 5.0, False, 8) is None  # centred on the threshold: steps alone won't decide
    few = find_regressions(_frame(_run("a", "2026-11-01", [100, 101, 99]), _run("b", "2026-11-02", [100, 102, 98])))
    r = _p50(few, "b")
    assert r["verdict"] == "inconclusive" and "at least" in r["reason"] and "steps on each side would" in r["reason"]


def test_a_family_is_one_days_runs_and_each_day_can_be_compared_alone():
    """``p_adjusted`` is adjusted over the tests of one ``date`` (every job name); comparing the runs of each date
    alone (``dates``, the other runs as baselines) gives the same rows as comparing every run at once — what lets
    a fleet run compare only the days whose runs or baselines changed."""
    runs = []
    for name, seed in (("nightly", 10), ("other", 20)):
        for d in range(4):
            slow = 1.3 if (name, d) == ("nightly", 3) else 1.0
            runs.append(_run(f"{name}-{d}", f"2026-11-0{d + 1}", _jitter(100 * slow, seed=seed + d), name=name))
    steps = _frame(*runs)
    whole = find_regressions(steps, baseline_runs=2)
    for date, g in whole[whole["p_value"].notna()].groupby("date"):
        assert g["p_adjusted"].to_numpy() == pytest.approx(bh_adjust(g["p_value"].to_numpy())), date
    days = [find_regressions(steps, baseline_runs=2, dates=[d]) for d in sorted(whole["date"].unique())]
    by_day = pd.concat([d.astype(whole.dtypes.to_dict()) for d in days])
    key = ["job_name", "job_id", "metric"]
    pd.testing.assert_frame_equal(
        whole.sort_values(key).reset_index(drop=True), by_day.sort_values(key).reset_index(drop=True)
    )
    assert set(find_regressions(steps, dates=["2026-11-03"])["job_id"]) == {"nightly-2", "other-2"}
    assert _p50(whole, "nightly-3")["verdict"] == "regression" and _p50(whole, "nightly-3")["run_index"] == 3
    assert list(_p50(whole, "nightly-3")["baseline_runs"]) == ["nightly-1#0", "nightly-2#0"]


def test_only_the_days_a_change_makes_stale_are_compared_again():
    """A new day's runs make only that day stale; a run changed in the middle of a job name's history makes its
    day stale and the days of the runs whose baseline holds it; a run gone, every later day of its job name."""
    from jobs.fleet.regressions import dates_to_compare, run_sequence

    runs = [_run(f"n-{d}", f"2026-11-0{d + 1}", _jitter(100, seed=d)) for d in range(6)]
    runs += [_run(f"o-{d}", f"2026-11-0{d + 1}", _jitter(100, seed=10 + d), name="other") for d in range(6)]
    steps = _frame(*runs)
    last = steps[steps["run_date"] < "2026-11-06"]
    previous = find_regressions(last, baseline_runs=2)
    seq = run_sequence(steps)
    assert dates_to_compare(seq, previous, {"n-5", "o-5"}, 2) == {"2026-11-06"}
    whole = find_regressions(steps, baseline_runs=2)
    assert dates_to_compare(seq, whole, set(), 2) == set()
    assert dates_to_compare(seq, whole, {"n-1"}, 2) == {"2026-11-02", "2026-11-03", "2026-11-04"}
    gone = steps[steps["job_id"] != "n-1"]
    # gone: its day, its followers' days (their baselines), and the later runs' days (their run_index moved)
    assert dates_to_compare(run_sequence(gone), whole, {"n-1"}, 2) == {f"2026-11-0{d}" for d in range(2, 7)}
    # the rows kept plus the stale days compared again are the rows of comparing everything
    stale = dates_to_compare(run_sequence(gone), whole, {"n-1"}, 2)
    merged = pd.concat(
        [whole[~whole["date"].isin(stale)], find_regressions(gone, baseline_runs=2, dates=stale)], ignore_index=True
    )
    key = ["job_name", "job_id", "metric"]
    pd.testing.assert_frame_equal(
        merged.sort_values(key).reset_index(drop=True),
        find_regressions(gone, baseline_runs=2).sort_values(key).reset_index(drop=True),
    )


def test_the_rows_of_the_runs_after_a_change_find_the_stale_days_the_whole_table_finds():
    """A fleet run reads back only the ``regressions`` rows of the dates of :func:`runs_after` (the runs from the
    first changed one on, in its job names): the stale days are those found over every stored row — a new day, a
    run changed in the middle, a run gone, a run moved to another job name."""
    from jobs.fleet.regressions import dates_to_compare, run_sequence, runs_after

    runs = [_run(f"n-{d}", f"2026-11-0{d + 1}", _jitter(100, seed=d)) for d in range(6)]
    runs += [_run(f"o-{d}", f"2026-11-0{d + 1}", _jitter(100, seed=10 + d), name="other") for d in range(6)]
    steps = _frame(*runs)
    old = steps[steps["run_date"] < "2026-11-06"]
    stored = find_regressions(old, baseline_runs=2)
    moved = steps.assign(job_name=np.where(steps["job_id"] == "n-2", "other", steps["job_name"]))
    cases = {  # now, before, changed jobs
        "new day": (steps, old, {"n-5", "o-5"}),
        "changed in the middle": (old, old, {"n-1"}),
        "gone": (old[old["job_id"] != "n-1"], old, {"n-1"}),
        "moved to another job name": (moved[moved["run_date"] < "2026-11-06"], old, {"n-2"}),
    }
    for case, (now, before, changed) in cases.items():
        seq, seq_before = run_sequence(now), run_sequence(before)
        touched = [(j, 0) for j in changed]
        after = runs_after(seq, seq_before, touched)
        read = stored[stored["date"].isin(set(after["run_date"]))]
        checked = set(zip(after["job_id"], after["attempt"]))
        assert dates_to_compare(seq, read, changed, 2, checked=checked) == dates_to_compare(seq, stored, changed, 2), (
            case
        )
        assert set(after["job_name"]) <= {"nightly", "other"}
    # a new day reads back that day's rows only
    assert set(runs_after(run_sequence(steps), run_sequence(old), [("n-5", 0)])["run_date"]) == {"2026-11-06"}
    assert not len(runs_after(run_sequence(steps), run_sequence(old), []))


def test_options_with_defaults_names_every_option_and_refuses_unknown_ones():
    from jobs.fleet.regressions import options_with_defaults

    assert options_with_defaults(alpha=0.05) == {
        "baseline_runs": 5,
        "threshold_pct": 5.0,
        "threshold_pp": 2.0,
        "alpha": 0.05,
    }
    with pytest.raises(TypeError, match="threshold"):
        options_with_defaults(threshold=3)
