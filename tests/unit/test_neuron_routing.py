"""Neuron / XLA files in the landing zone: detected by name and content, routed to their parsers, raw
captures kept as quarantined rows with the reason (never dropped), Kineto behaviour unchanged."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from jobs.landing.discover import discover, route_files
from jobs.landing.formats import head_text, kind_from_name, pair_key, sniff_json
from jobs.normalize.job import _read_task, disambiguate_bare_jobs, neuron_summary_rows, normalize_file

KINETO = {
    "schemaVersion": 1,
    "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5}],
}
XPLANE = "neuron/generated__jax_cpu_xplane_sample/plugins/profile/2026_11_30_06_33_40"


@pytest.fixture(scope="module")
def gen():
    path = Path(__file__).resolve().parents[1] / "fixtures" / "neuron_parquet_gen.py"
    spec = importlib.util.spec_from_file_location("neuron_parquet_gen", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("neuron_parquet_gen", mod)
    spec.loader.exec_module(mod)
    return mod


def _run(f) -> tuple[dict, object]:
    task = f.to_dict()
    task["tags"] = {}
    data, err = _read_task(task, {})
    return normalize_file(task, data, err)


def test_names_and_content_sniffing():
    assert kind_from_name("a/b/123_instid_0_vnc_0.ntff") == "neuron_raw"
    assert kind_from_name("neff_123.neff") == "neuron_raw" and kind_from_name("x/ntrace.pb") == "neuron_raw"
    assert kind_from_name("host.xplane.pb") == "xplane" and kind_from_name("other.pb") is None
    assert kind_from_name("Summary.parquet") == "neuron_parquet" and kind_from_name("notes.txt") is None
    assert pair_key("neff_14382885777943380728.neff") == pair_key("14382885777943380728_instid_0_vnc_3.ntff")
    assert sniff_json(b'{"summary": [{"total_time": 1}], "instruction": []}') == "neuron_json"
    # a Kineto trace may open with a "metadata" *object* (TraceLens): not a legacy Neuron profile
    assert sniff_json(b'{\n  "metadata": {"profiler": {}}, "traceEvents": [') == "kineto"
    assert sniff_json(b'{"trace_events": [], "cpu_util": []}') == "neuron_system_json"
    assert sniff_json(b'INFO converting\n{"nc0": {"total_time": 0.1}}') == "neuron_summary_json"
    assert sniff_json(b'{"displayTimeUnit":"ns","metadata":{"highres-ticks":true},"traceEvents":[') == "xla_trace"
    assert sniff_json(b'[{"ph": "X"}]') == "kineto"
    assert head_text(gzip.compress(b'{"a": 1}')) == b'{"a": 1}'


def test_corpus_neuron_folder(CORPUS):
    found = discover(str(CORPUS / "neuron"))
    assert found.pending == []
    kinds = sorted(f.kind for f in found.files)
    assert kinds == ["auto"] * 5 + ["neuron_raw"] * 3 + ["xplane"]
    caps = {Path(f.uri).name: _run(f) for f in found.files}
    for name in ("profile_128x128x1024", "profile_128x128x520", "profile_bucketed_128x128x2048"):
        row, ev = caps[f"{name}.json"]
        assert (row["status"], row["source"], row["format"]) == ("ingested", "neuron", "neuron-json")
        assert row["n_events"] == ev.num_rows > 0 and len(row["_neuron_summary"]) == 1
        assert row["device_name"] == "inf2.xlarge" and row["time_base"] == "device-relative-ns"
        assert row["container"] == "json"
        raw, _ = caps[f"{name}.ntff"]
        # still a captures row (never dropped); the contract's status is quarantined, the flag says why
        assert raw["status"] == "cataloged" and raw["source"] == "neuron" and raw["format"] == "ntff"
        assert raw["flags"] == ["converted_form_ingested"] and raw["container"] is None
        assert f"{name}.json is ingested" in raw["reason"]
        data = (next(CORPUS.glob(f"neuron/**/{name}.ntff"))).read_bytes()
        assert raw["sha256"] == hashlib.sha256(data).hexdigest() and raw["size_bytes"] == len(data)
    xla, ev = caps["vm.trace.json.gz"]
    assert xla["status"] == "ingested" and xla["source"] == "xla" and set(ev.column("source").to_pylist()) == {"xla"}
    xp, _ = caps["vm.xplane.pb"]
    assert xp["status"] == "cataloged" and xp["source"] == "xla" and "vm.trace.json.gz is ingested" in xp["reason"]
    assert xp["flags"] == ["converted_form_ingested"]
    conv, _ = caps["xprof_trace_viewer_output.json"]
    assert conv["source"] == "xla" and conv["n_events"] == 87


def test_raw_capture_without_converted_form_is_quarantined_with_pairing(tmp_path):
    d = tmp_path / "inspect" / "i-012590440bb9fd263_pid_98399"
    d.mkdir(parents=True)
    (d / "14382885777943380728_instid_0_vnc_0.ntff").write_bytes(b"NTFF" * 100)
    (d / "neff_14382885777943380728.neff").write_bytes(b"NEFF" * 50)
    (d / "99999999_instid_0_vnc_1.ntff").write_bytes(b"x")
    for n in ("ntrace.pb", "trace_info.pb", "cpu_util.pb", "host_mem.pb"):
        (d / n).write_bytes(b"\x08\x01")
    found = discover(str(tmp_path))
    assert len(found.files) == 7 and {f.kind for f in found.files} == {"neuron_raw"}
    rows = {Path(f.uri).name: _run(f)[0] for f in found.files}
    for name, row in rows.items():
        assert row["status"] == "cataloged" and "needs neuron-explorer conversion" in row["reason"], name
        assert row["reason"].startswith(str(d / name)) and row["source"] == "neuron"
    assert "paired with neff_14382885777943380728.neff" in rows["14382885777943380728_instid_0_vnc_0.ntff"]["reason"]
    assert "paired with 14382885777943380728_instid_0_vnc_0.ntff" in rows["neff_14382885777943380728.neff"]["reason"]
    assert rows["99999999_instid_0_vnc_1.ntff"]["flags"] == ["ntff_without_neff"]
    assert (
        rows["ntrace.pb"]["format"] == "neuron-system-pb" and rows["neff_14382885777943380728.neff"]["format"] == "neff"
    )
    assert rows["14382885777943380728_instid_0_vnc_0.ntff"]["size_bytes"] == 400


def _manifest(files, **over):
    m = {
        "schema_version": "1",
        "job_id": "llm",
        "attempt": 0,
        "rank": 2,
        "local_rank": 2,
        "world_size": 4,
        "node": 0,
        "host": "h1",
        "accelerator": "neuron",
        "device_name": None,
        "torch_version": "2.13.0",
        "cuda_version": None,
        "created_at": "2026-11-30T10:00:00Z",
        "step_range": {"first": 1, "last": 2},
        "capture_id": "c1",
        "profiler": {"name": "torch.profiler"},
        "tags": {},
        "files": files,
    }
    m.update(over)
    return m


def test_committed_capture_with_neuron_and_xla_files(tmp_path, gen, CORPUS):
    pytest.importorskip("jsonschema")
    cap = tmp_path / "date=2026-11-30" / "job=llm" / "attempt=0" / "rank=00002" / "c1"
    (cap / "neuron" / "i-1_pid_7" / "raw").mkdir(parents=True)
    (cap / "trace.json.gz").write_bytes(gzip.compress(json.dumps(KINETO).encode()))
    (cap / "neuron" / "i-1_pid_7" / "raw" / "5555555555_instid_0_vnc_0.ntff").write_bytes(b"NTFF")
    rows = gen.synthetic_profile(1)
    gen.write_parquet_profile(rows, cap / "neuron" / "i-1_pid_7" / "parquet")
    (cap / "neuron" / "i-1_pid_7" / "summary.json").write_text(json.dumps({"p": rows["Summary"][0]}))
    xla = cap / "xla" / "plugins" / "profile" / "r1"
    xla.mkdir(parents=True)
    for n in ("vm.xplane.pb", "vm.trace.json.gz"):
        shutil.copy(CORPUS / XPLANE / n, xla / n)
    files = []
    for p in sorted(cap.rglob("*")):
        if p.is_file():
            rel = p.relative_to(cap).as_posix()
            kind = (
                "kineto_trace"
                if rel == "trace.json.gz"
                else "neuron_raw"
                if "/raw/" in rel
                else "neuron_parquet"
                if rel.endswith(".parquet")
                else "neuron_summary_json"
                if rel.endswith("summary.json")
                else "xplane"
                if rel.endswith(".xplane.pb")
                else "xla_trace_json"
            )
            files.append(
                {
                    "path": rel,
                    "size_bytes": p.stat().st_size,
                    "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                    "kind": kind,
                }
            )
    (cap / "manifest.json").write_text(json.dumps(_manifest(files)))
    found = discover(str(tmp_path))
    assert found.pending == []
    by_kind = {f.kind: f for f in found.files}
    assert sorted(by_kind) == ["auto", "neuron_parquet", "neuron_raw", "neuron_summary_json", "xla_trace", "xplane"]
    assert all((f.job_id, f.rank, f.rank_source) == ("llm", 2, "manifest") for f in found.files)
    assert len({f.capture_id for f in found.files}) == 6
    parquet = by_kind["neuron_parquet"]
    assert parquet.uri.endswith("neuron/i-1_pid_7/parquet") and "Instruction.parquet" in parquet.members
    assert parquet.size_bytes == sum(p.stat().st_size for p in (cap / "neuron/i-1_pid_7/parquet").iterdir())
    assert by_kind["neuron_raw"].converted == parquet.uri and by_kind["neuron_summary_json"].converted == parquet.uri
    out = {f.kind: _run(f) for f in found.files}
    assert out["auto"][0]["status"] == "ingested" and out["auto"][0]["source"] == "kineto"
    prow, pev = out["neuron_parquet"]
    assert (prow["status"], prow["source"], prow["format"]) == ("ingested", "neuron", "neuron-parquet-7.4.0")
    assert prow["container"] is None and prow["rank"] == 2 and pev.num_rows == prow["n_events"]
    (summ,) = prow["_neuron_summary"]
    assert summ["profile_id"] == "i-1_pid_7" and summ["source_format"] == "neuron-parquet"
    for k in ("neuron_raw", "neuron_summary_json", "xplane"):
        assert out[k][0]["status"] == "cataloged" and "converted_form_ingested" in out[k][0]["flags"], k
    assert out["xla_trace"][0]["source"] == "xla" and out["xla_trace"][0]["status"] == "ingested"
    caps = [r for r, _ in out.values()]
    (ns,) = neuron_summary_rows(caps)
    assert (ns["job_id"], ns["rank"], ns["capture_id"]) == (
        "llm",
        2,
        prow["capture_id"],
    ) and "_neuron_summary" not in prow


def test_uncommitted_capture_with_subfolders_is_one_pending_entry(tmp_path):
    cap = tmp_path / "date=2026-11-30" / "job=llm" / "attempt=0" / "rank=00002" / "c9"
    (cap / "neuron" / "f" / "raw").mkdir(parents=True)
    (cap / "trace.json").write_text("{}")
    (cap / "neuron" / "f" / "raw" / "a.ntff").write_bytes(b"x")
    found = discover(str(tmp_path))
    assert found.files == [] and found.pending == [str(cap)]


def test_bare_neuron_profiles_of_one_folder_stay_one_job(tmp_path):
    caps = [
        {
            "capture_id": c,
            "job_id": "sweep",
            "attempt": 0,
            "rank": 0,
            "status": "ingested",
            "source": "neuron",
            "uri": f"/x/{c}.json",
        }
        for c in ("a", "b")
    ]
    tasks = {c["capture_id"]: {"bare": True} for c in caps}
    assert disambiguate_bare_jobs(caps, tasks) == {}
    for c in caps:
        c["source"] = "kineto"
    assert set(disambiguate_bare_jobs(caps, tasks)) == {"a", "b"}


def test_route_files_links_converted_forms():
    r = {
        x.rel: x
        for x in route_files(
            [
                "p/a.ntff",
                "p/a.json",
                "p/b.ntff",
                "h.xplane.pb",
                "h.trace.json.gz",
                "q/Metadata.parquet",
                "q/Summary.parquet",
                "stray/x.parquet",
            ]
        )
    }
    assert r["p/a.ntff"].converted == "p/a.json" and r["p/b.ntff"].converted is None
    assert r["h.xplane.pb"].converted == "h.trace.json.gz"
    assert r["q"].kind == "neuron_parquet" and r["q"].members == ["Metadata.parquet", "Summary.parquet"]
    assert "stray" not in r  # a lone parquet that is not an Explorer table is not a profile


def test_unparsable_neuron_json_is_quarantined():
    task = {"uri": "/lz/bad.json", "capture_id": "c", "job_id": "j", "kind": "auto"}
    row, ev = normalize_file(task, b'{"instruction": [{"timestamp": "x"}], "metadata": "oops"')
    assert row["status"] == "quarantined" and row["source"] == "neuron" and ev is None
    assert row["reason"].startswith("/lz/bad.json: ")


def test_captures_rows_respect_the_value_sets(CORPUS):
    from schemas.expectations import VALUE_SETS

    for f in discover(str(CORPUS / "neuron")).files:
        row, _ = _run(f)
        for col in ("status", "source", "container"):
            allowed = VALUE_SETS[("captures", col)]
            assert row[col] is None or row[col] in allowed, (f.uri, col, row[col])
