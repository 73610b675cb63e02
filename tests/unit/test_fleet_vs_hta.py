"""Pure logic of ``benchmarks/fleet_vs_hta.py`` (no Spark, no HTA): fleet selection from a corpus listing,
the synthetic fleet's size, the target lines, and the Kineto layout that lets HTA find a generated file's rank."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("fleet_vs_hta")
    finally:
        sys.path.remove(str(BENCH))


DLRM = "torch/param/dlrm_kineto"


def _listing(n_single: int):
    jobs = {DLRM: [f"{DLRM}/w{r}.json" for r in range(8)], "torch/tf": ["torch/tf/r0.json.gz", "torch/tf/r1.json.gz"]}
    sizes = {k: 1000 for k in jobs[DLRM]} | {"torch/tf/r0.json.gz": 5, "torch/tf/r1.json.gz": 5}
    for i in range(n_single):
        key = f"torch/s{i:02d}.json.gz"
        jobs[key] = [key]
        sizes[key] = 100 * (i + 1)
    return jobs, sizes


def test_fleet_selection(bench):
    jobs, sizes = _listing(14)
    broken = "torch/s13.json.gz"  # the largest single trace, but HTA cannot load it
    loadable = set(jobs) - {broken}
    f1, f2, tiny = bench.select_corpus_fleets(jobs, sizes, loadable)
    assert f1 == [DLRM] + [f"torch/s{i:02d}.json.gz" for i in range(12, 2, -1)]  # the 10 largest loadable
    assert f2 == ["torch/s00.json.gz", "torch/s01.json.gz", "torch/s02.json.gz", "torch/tf"]
    assert broken not in f1 + f2 and not set(f1) & set(f2)
    assert tiny == "torch/s00.json.gz"
    size = lambda j: sum(sizes[k] for k in jobs[j])  # noqa: E731
    assert bench.smallest(f2, size) == ["torch/tf"]


def test_hta_loadable(bench, tmp_path):
    p = tmp_path / "golden.json"
    p.write_text(
        json.dumps(
            {
                "jobs": {
                    "a": {"status": "done", "errors": {}},
                    "b": {"status": "done", "errors": {"load": "KeyError: x"}},
                    "c": {"status": "timeout", "errors": {}},
                    "d": {"status": "done", "errors": {"temporal_breakdown": "e"}},
                }
            }
        )
    )
    assert bench.hta_loadable(str(p)) == {"a", "d"}
    assert bench.hta_loadable(str(tmp_path / "missing.json")) is None


def test_synthetic_units(bench):
    assert bench.synthetic_units(1e9, 30_000_000) == 34  # even, and 34 x 30 MB >= 1 GB
    assert bench.synthetic_units(1e6, 30_000_000) == 2
    assert bench.synthetic_units(60e6, 30_000_000) == 2


def _med(wall=None, cpu=None, executor=None, error=None):
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "memory": {"executor": executor} if executor else None,
        "errors": [error] if error else [],
    }


def _fleet(name, mb, **kw):
    return {
        "name": name,
        "jobs": [f"{name}-a", f"{name}-b"],
        "n_jobs": 2,
        "n_files": 3,
        "json_bytes": int(mb * 1e6),
        **kw,
    }


def test_targets(bench):
    res = {
        "cores": [1, 2],
        "fleets": {
            "1": _fleet(
                "fleet 1",
                250,
                hta=_med(100.0, 90.0),
                tracelake={"run": {"2": _med(70.0, 120.0)}, "run_no_mlflow": {"2": _med(60.0, 100.0)}},
            ),
            "2": _fleet("fleet 2", 5, hta=_med(10.0), tracelake={"run": {"2": _med(None, error="exit 1: boom")}}),
            "3": _fleet(
                "fleet 3",
                1200,
                hta=_med(900.0),
                tracelake={"run": {"1": _med(500.0), "2": _med(250.0, 400.0, 2.4e9)}},
                parse_only={"full": _med(cpu=7.0), "half": _med(cpu=4.0)},
                half=_fleet("fleet 3 (half)", 600, tracelake={"run": {"2": _med(140.0, 220.0, 2.0e9)}}),
            ),
        },
        "tiny": _fleet("tiny", 0.02, tracelake={"run": {"2": _med(16.0, 20.0)}}),
    }
    by = {(t["target"], t["what"].split(" (")[0]): t for t in bench.evaluate_targets(res)}
    assert len(by) == 7
    t1 = by[(1, "fleet 3")]
    assert t1["value"] == pytest.approx(250 / 900) and t1["status"] == "ok"
    assert by[(2, "fleet 1")]["status"] == "ok" and by[(2, "fleet 1")]["value"] == pytest.approx(0.7)
    t2 = by[(2, "fleet 2")]
    assert t2["status"] == "n/a" and "exit 1: boom" in t2["text"]
    t3 = next(t for t in by.values() if t["target"] == 3)
    assert t3["value"] == pytest.approx(((400 - 220) / 600) / ((7 - 4) / 600)) and t3["status"] == "MISSED"
    t4 = next(t for t in by.values() if t["target"] == 4)
    assert t4["status"] == "MISSED" and t4["value"] == 16.0
    t5 = next(t for t in by.values() if t["target"] == 5)
    assert t5["value"] == pytest.approx(2.0) and t5["status"] == "ok"
    t6 = next(t for t in by.values() if t["target"] == 6)
    assert t6["value"] == pytest.approx(1.2) and t6["status"] == "ok"
    for t in by.values():
        assert t["text"].startswith(f"target {t['target']}: ")
        assert t["text"].endswith((": ok", ": MISSED")) or "n/a (" in t["text"]
    assert by[(2, "fleet 1")]["text"] == (
        "target 2: fleet 1 (2 jobs, 3 files, 250.0 MB JSON): tracelake run 70.0 s "
        "(--no-mlflow 60.0 s) vs HTA loop 100.0 s = 0.70x (target <= 0.80x): ok"
    )
    assert t4["text"].endswith("= 16.0 s (target <= 15.0 s): MISSED")


def test_targets_without_runs(bench):
    lines = bench.evaluate_targets({"cores": [2], "fleets": {}, "hta_skipped": "HTA skipped"})
    assert [t["target"] for t in lines] == [1, 2, 2, 3, 4, 5, 6]
    assert all(t["status"] == "n/a" for t in lines)


def test_generated_trace_rank_is_found_as_hta_does(bench):
    import fleet_bench

    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},
        "traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "args": {"rank": 1}}],
    }
    data = fleet_bench.kineto_bytes(doc)
    assert json.loads(data) == doc
    rank_re = re.compile(r'"rank":\s+(\d+)')  # hta/common/trace_file.py: first line that matches
    first = next(m for line in data.decode().splitlines() if (m := rank_re.search(line)))
    assert first.group(1) == "5"
