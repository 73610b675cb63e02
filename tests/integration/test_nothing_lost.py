"""Nothing lost, nothing doubled: every raw file of a mixed landing zone is accounted for in ``captures``
after every run, and running the main job twice leaves every warehouse table identical."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from warehouse_digest import WAREHOUSE_TABLES, warehouse_digests

pytestmark = pytest.mark.integration

NEURON = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "neuron" / "AnchovyPark__npu_profiling_code"
DLRM = "param/dlrm_kineto/worker{r}_step_12.*.pt.trace.json"
PAIR = "HolisticTraceAnalysis/trace_filter/sampled_rank-{r}.json.gz"
ALEXNET = "HolisticTraceAnalysis/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def _manifest(trace: bytes, rank: int, cid: str) -> dict:
    return {
        "schema_version": "1",
        "job_id": "lz",
        "attempt": 0,
        "rank": rank,
        "local_rank": rank,
        "world_size": 2,
        "node": 0,
        "host": "h1",
        "accelerator": "cuda",
        "device_name": None,
        "torch_version": "2.4.0",
        "cuda_version": None,
        "created_at": "2024-05-01T10:00:00Z",
        "step_range": {"first": 1, "last": 3},
        "capture_id": cid,
        "profiler": {"name": "torch.profiler", "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}},
        "tags": {"model": "alexnet"},
        "files": [
            {
                "path": "trace.json.gz",
                "size_bytes": len(trace),
                "sha256": hashlib.sha256(trace).hexdigest(),
                "kind": "kineto_trace",
            }
        ],
    }


@pytest.fixture(scope="module")
def zone(tmp_path_factory, torch_corpus):
    """A landing zone whose expected accounting follows from how it is built.

    Returns ``(root, expected)``: ``expected`` maps each raw file that must become a ``captures`` row to
    its status; the uncommitted capture (no manifest yet) is not in it.
    """
    root = tmp_path_factory.mktemp("zone")
    expected: dict[str, str] = {}

    def link(folder: str, src: Path, status: str) -> None:
        (root / folder).mkdir(exist_ok=True)
        dst = root / folder / src.name
        shutil.copyfile(src, dst)
        expected[str(dst)] = status

    for r in range(4):  # bare traces, one job of 4 ranks
        link("dlrm", next(torch_corpus.glob(DLRM.format(r=r))), "ingested")
    for r in range(2):
        link("pair", torch_corpus / PAIR.format(r=r), "ingested")
    link("neuron", NEURON / "matmul" / "neuron_profile_results" / "profile_128x128x520.json", "ingested")
    link("neuron", NEURON / "matmul" / "neuron_profile_results" / "profile_128x128x520.ntff", "cataloged")
    good = gzip.decompress((torch_corpus / ALEXNET).read_bytes())
    bad = root / "bad"
    bad.mkdir()
    cut = bad / "truncated.json"  # cut in the middle: its complete events are kept (flag truncated_tail)
    cut.write_bytes(good[: len(good) // 2])
    expected[str(cut)] = "ingested"
    for name, data in {
        "truncated.json.gz": gzip.compress(good)[:3000],
        "notjson.json": b"this is not json at all",
        "notatrace.json": json.dumps({"hello": [1]}).encode(),
        "empty.json": b"",
    }.items():
        (bad / name).write_bytes(data)
        expected[str(bad / name)] = "quarantined"
    trace = (torch_corpus / ALEXNET).read_bytes()
    for rank, committed in ((0, True), (1, False)):  # landing-zone captures: one committed, one still being written
        d = root / "date=2024-05-01" / "job=lz" / "attempt=0" / f"rank={rank:05d}" / f"c{rank}"
        d.mkdir(parents=True)
        (d / "trace.json.gz").write_bytes(trace)
        if committed:
            (d / "manifest.json").write_text(json.dumps(_manifest(trace, rank, f"c{rank}")))
            expected[str(d / "trace.json.gz")] = "ingested"
    return root, expected


@pytest.fixture(scope="module")
def two_runs(spark, zone, tmp_path_factory):
    """The main job (no MLflow) run twice on ``zone`` into one warehouse, digests after each run."""
    from jobs.pipeline.run import run_pipeline

    root, _ = zone
    wh = tmp_path_factory.mktemp("wh")
    out = []
    for _ in range(2):
        res = run_pipeline(str(root), str(wh), spark=spark, log_to_mlflow=False)
        out.append((res, warehouse_digests(wh)))
    return wh, out


def _discovered_check(res):
    (check,) = [c for c in res.validation.tables["normalize/captures"].checks if c.id == "row_count:discovered"]
    return check


def test_every_raw_file_is_ingested_quarantined_or_cataloged_after_every_run(zone, two_runs):
    root, expected = zone
    assert len(expected) == 14 and sum(s == "quarantined" for s in expected.values()) == 4
    _, runs = two_runs
    for res, _ in runs:
        caps = res.captures
        got = dict(zip(caps["uri"].map(lambda u: u.removeprefix("file://")), caps["status"]))
        assert got == expected  # one row per raw file, none lost, none doubled, the status it must have
        assert caps["uri"].is_unique
        check = _discovered_check(res)  # the Great Expectations gate says the same
        assert check.success, check
        assert res.pending and any("rank=00001" in p for p in res.pending)
        q = caps[caps["status"] == "quarantined"]
        assert all(os.path.basename(u) in r for u, r in zip(q["uri"], q["reason"]))  # reason names the file


def test_running_twice_gives_identical_tables(two_runs):
    wh, [(_, first), (_, second)] = two_runs
    for table in WAREHOUSE_TABLES:
        assert first[table], f"{table}: empty, the comparison would prove nothing"
        assert second[table] == first[table], table
    # nothing doubled in the tables either: the live files of each partition (the table's current Delta version)
    # come from one write (<write id>-…: the driver's Arrow rows, Spark's tasks and the workers' files alike)
    from deltalake import DeltaTable

    write_id = re.compile(r"(\d{8}T\d{12}Z-[0-9a-f]{8})-")
    for table in WAREHOUSE_TABLES:
        if not (wh / table / "_delta_log").is_dir():
            continue
        by_part: dict[str, set] = {}
        for uri in DeltaTable(str(wh / table)).file_uris():
            part, name = os.path.split(os.path.relpath(uri, wh / table))
            by_part.setdefault(part, set()).add(write_id.match(name).group(1))
        assert by_part and all(len(w) == 1 for w in by_part.values()), (table, by_part)
    assert not list((wh / "_commit" / "work").glob("*"))  # every run's work folder is gone
