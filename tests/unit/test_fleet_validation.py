"""Great Expectations over the fleet tables (stage ``fleet`` of schemas/expectations.STAGE_TABLES): checks derived
from their declarations, a corrupted row caught, the table-level mark, and a failed fleet table failing the run."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

from jobs.fleet.hosts import host_health
from schemas import FLEET_TABLES
from schemas.expectations import STAGE_TABLES, checks_for


def _health() -> pd.DataFrame:
    """host_health of two real-shaped runs: host ``bad`` last at 9 of 10 calls in both."""
    caps, ranks, colls = [], [], []
    for job in ("a", "b"):
        hosts = {0: "bad", 1: "bad", 2: f"n{job}", 3: f"n{job}"}
        caps += [
            {
                "job_id": job,
                "attempt": 0,
                "rank": r,
                "status": "ingested",
                "host_name": h,
                "device_name": "H100",
                "date": "2026-05-10",
            }
            for r, h in hosts.items()
        ]
        ranks += [{"job_id": job, "attempt": 0, "rank": r, "step_time_p50_ns": 1e8, "device_index": r} for r in hosts]
        colls += [
            {
                "job_id": job,
                "attempt": 0,
                "rank": r,
                "match_key": f"{job}/{i}",
                "n_ranks_matched": 4,
                "is_last_arrival": r == (0 if i < 9 else 2),
            }
            for i in range(10)
            for r in hosts
        ]
    return host_health(pd.DataFrame(caps), pd.DataFrame(ranks), pd.DataFrame(colls))


def test_every_fleet_table_has_a_suite():
    assert STAGE_TABLES["fleet"] == tuple(FLEET_TABLES)
    ids = {t: {c.id for c in checks_for(t)} for t in FLEET_TABLES}
    assert {
        "unique:key",
        "in_set:kind",
        "consistent:slow_within_jobs",
        "consistent:last_within_matched",
        "non_negative:busbw_ratio",
    } <= ids["host_health"]
    assert {"consistent:p50_le_p90", "consistent:p90_le_p99", "in_set:dimension"} <= ids["fleet_stats"]
    assert {"range:p_value", "in_set:verdict", "in_set:metric"} <= ids["regressions"]
    assert {"at_least_one:impact_rank", "consistent:jobs_within_runs"} <= ids["fleet_findings"]
    # signed measures are not range-checked as shares
    assert not {"pct_range:step_excess_p50_pct", "non_negative:step_excess_p50_ns"} & ids["host_health"]
    assert "pct_range:change_pct" not in ids["regressions"]


def test_a_corrupted_fleet_row_fails_and_marks_the_table(tmp_path):
    from jobs.pipeline.stages import ValidationFailed, check_validation
    from jobs.validate.marks import read_table_marks, write_marks
    from jobs.validate.suites import validate_frames

    h = _health()
    assert set(h["kind"]) == {"host", "device"} and h["step_excess_p50_pct"].notna().all()
    ok = validate_frames({"host_health": h}, "fleet")
    assert ok.tables["fleet/host_health"].status == "passed"
    assert ok.tables["fleet/fleet_stats"].status == "missing"  # not written: not a failure
    bad = h.copy()
    bad.loc[0, "n_slow_jobs"] = bad.loc[0, "n_jobs"] + 1  # slow in more jobs than it ran in
    bad.loc[1, "kind"] = "rack"
    report = validate_frames({"host_health": bad}, "fleet")
    t = report.tables["fleet/host_health"]
    failed = {c.id: c for c in t.failed}
    assert set(failed) == {"consistent:slow_within_jobs", "in_set:kind"}
    assert failed["consistent:slow_within_jobs"].unexpected_count == 1
    from jobs.warehouse import write_table

    write_table(pa.Table.from_pandas(h, preserve_index=False), str(tmp_path), "host_health")  # written tables
    write_table(FLEET_TABLES["fleet_stats"].empty(), str(tmp_path), "fleet_stats")
    write_marks(str(tmp_path), report)
    marks = read_table_marks(str(tmp_path), FLEET_TABLES)
    assert marks["host_health"]["status"] == "failed"
    assert {f["id"] for f in marks["host_health"]["failed"]} == set(failed)
    assert marks["fleet_stats"]["status"] == "unvalidated" and "regressions" not in marks  # never written
    with pytest.raises(ValidationFailed, match="fleet table.s. host_health failed validation"):
        check_validation({"validation": {"fleet": report.to_dict()}})
    check_validation({"validation": {"fleet": ok.to_dict()}})  # passes: no error


def test_the_fleet_report_shows_the_fleet_validation():
    from jobs.publish.report.fleet_tables import validation_section

    marks = {
        "host_health": {
            "status": "failed",
            "validated_at": "2026-12-02T10:00:00+00:00",
            "failed": [{"id": "in_set:kind", "unexpected_count": 1}],
        },
        "fleet_stats": {"status": "passed", "validated_at": "2026-12-02T10:00:00+00:00", "failed": []},
    }
    sec = validation_section(marks)
    assert sec.status == "failed" and "1 of 2 table(s) not passed: host_health" in sec.intro
    rows = json.dumps(sec.tables[0].__dict__, default=str)
    assert "in_set:kind (1)" in rows
    assert validation_section({}).status == "unavailable"
