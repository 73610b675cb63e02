"""Unit tests of capture_hooks: identity parsing, path safety, manifest schema, failure isolation.

The capture tests run the real torch.profiler (CPU) on a tiny model for a few steps.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import logging
import re
from pathlib import Path

import jsonschema
import pytest
import torch

from capture_hooks import (
    LandingZoneSink,
    TraceCapture,
    detect_identity,
    landing_path,
    launch_info_from_env,
    make_path_safe,
    parse_tags,
    validate_path_component,
)

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "manifest.v1.json"
LAYOUT = re.compile(r"date=\d{4}-\d{2}-\d{2}/job=([^/]+)/attempt=(\d+)/rank=(\d{5})/([^/]+)$")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def _train(capture: TraceCapture, steps: int) -> int:
    """A tiny SGD loop calling capture.step() each iteration; returns the iterations done."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        capture.step()
        done += 1
    return done


def _profiler_steps(trace: dict) -> list[int]:
    return sorted(
        {
            int(e["name"].split("#", 1)[1])
            for e in trace["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")
        }
    )


# ---------------------------------------------------------------- identity


def test_torchrun_env():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "2", "TORCHELASTIC_RESTART_COUNT": "3"}
    info = launch_info_from_env(env)
    assert (info.rank, info.local_rank, info.world_size, info.node, info.attempt, info.launcher) == (
        5,
        1,
        8,
        2,
        3,
        "torchrun",
    )


def test_slurm_env_and_ntasks_fallback():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_NODEID": "1",
        "SLURM_RESTART_COUNT": "2",
    }
    info = launch_info_from_env(env)
    assert (info.rank, info.local_rank, info.world_size, info.node, info.attempt, info.launcher) == (
        3,
        1,
        4,
        1,
        2,
        "slurm",
    )
    env2 = {"SLURM_PROCID": "0", "SLURM_NPROCS": "2"}
    info2 = launch_info_from_env(env2)
    assert (info2.rank, info2.world_size, info2.local_rank, info2.node, info2.attempt) == (0, 2, None, None, None)


def test_mpi_envs():
    ompi = {"OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_SIZE": "16"}
    info = launch_info_from_env(ompi)
    assert (info.rank, info.local_rank, info.world_size, info.node, info.launcher) == (6, 2, 16, None, "openmpi")
    pmi = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}
    info = launch_info_from_env(pmi)
    assert (info.rank, info.local_rank, info.world_size, info.launcher) == (1, 1, 2, "pmi")


def test_launcher_precedence_and_default():
    # torchrun started by srun (one task per node): torchrun's global RANK wins over SLURM_PROCID.
    env = {
        "RANK": "9",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "1",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_RESTART_COUNT": "4",
    }
    info = launch_info_from_env(env)
    assert (info.rank, info.world_size, info.launcher) == (9, 16, "torchrun")
    assert info.attempt == 4  # no TORCHELASTIC_RESTART_COUNT: the SLURM requeue count
    # RANK without WORLD_SIZE is not a torchrun environment.
    assert launch_info_from_env({"RANK": "3"}).launcher == "default"
    default = launch_info_from_env({})
    assert (default.rank, default.world_size, default.local_rank, default.node, default.attempt) == (
        0,
        1,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"RANK": "one", "WORLD_SIZE": "2"}, "RANK"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "WORLD_SIZE"),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, "SLURM_NTASKS"),
    ],
)
def test_bad_launcher_env_names_the_variable(env, needle):
    with pytest.raises(ValueError, match=needle):
        launch_info_from_env(env)


def test_detect_identity_single_process():
    ident = detect_identity({})
    assert (ident.rank, ident.world_size, ident.launcher) == (0, 1, "default")
    assert ident.torch_version == torch.__version__
    assert ident.host and ident.pid > 0
    if not torch.cuda.is_available():
        assert (ident.accelerator, ident.device_name, ident.cuda_version) == ("cpu", None, None)


# ---------------------------------------------------------------- path safety


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "..",
        ".",
        "a/b",
        "../x",
        "x/..",
        "a\\b",
        "a..b",
        ".hidden",
        "-x",
        "a b",
        "job=1",
        "tab\t",
        "é",
        "x" * 201,
        7,
        None,
    ],
)
def test_unsafe_components_are_rejected(bad):
    with pytest.raises(ValueError):
        validate_path_component(bad, "job_id")


@pytest.mark.parametrize("good", ["llama-7b_run.3", "0", "A", "_x", "x" * 200])
def test_safe_components_pass(good):
    assert validate_path_component(good) == good


@pytest.mark.parametrize("raw", ["../../etc/passwd", "host name/with\\odd:chars", "..", "...", "", "-.-", "ü" * 300])
def test_make_path_safe_output_is_safe(raw):
    validate_path_component(make_path_safe(raw))


def test_landing_path_layout_and_rejection():
    assert landing_path(date="2025-05-01", job_id="j1", attempt=2, rank=17, capture_id="h-1-0-9") == (
        "date=2025-05-01/job=j1/attempt=2/rank=00017/h-1-0-9"
    )
    with pytest.raises(ValueError, match="job_id"):
        landing_path(date="2025-05-01", job_id="../j", attempt=0, rank=0, capture_id="c")
    with pytest.raises(ValueError, match="rank"):
        landing_path(date="2025-05-01", job_id="j", attempt=0, rank=-1, capture_id="c")
    with pytest.raises(ValueError, match="date"):
        landing_path(date="2025/05/01", job_id="j", attempt=0, rank=0, capture_id="c")


def test_capture_config_rejects_unsafe_or_malformed(tmp_path):
    with pytest.raises(ValueError, match="job_id"):
        TraceCapture(str(tmp_path), job_id="../other-job", env={})
    with pytest.raises(ValueError, match="job_id"):
        TraceCapture(str(tmp_path), env={"TRACELAKE_JOB_ID": "a/b"})
    with pytest.raises(ValueError, match="TRACELAKE_ATTEMPT"):
        TraceCapture(str(tmp_path), job_id="j", env={"TRACELAKE_ATTEMPT": "-1"})
    with pytest.raises(ValueError, match="TRACELAKE_TAGS"):
        TraceCapture(str(tmp_path), job_id="j", env={"TRACELAKE_TAGS": "team=infra,oops"})
    with pytest.raises(ValueError, match="active"):
        TraceCapture(str(tmp_path), job_id="j", active=0, env={})
    assert parse_tags(" team = infra , run=7,empty= ") == {"team": "infra", "run": "7", "empty": ""}


def test_job_name_tag_from_env(tmp_path):
    assert TraceCapture(str(tmp_path), job_id="j", env={"TRACELAKE_JOB_NAME": "nightly-llm"}).tags == {
        "job_name": "nightly-llm"
    }
    assert TraceCapture(str(tmp_path), job_id="j", env={"SLURM_JOB_NAME": "train"}).tags == {"job_name": "train"}
    explicit = TraceCapture(str(tmp_path), job_id="j", tags={"job_name": "mine"}, env={"TRACELAKE_JOB_NAME": "env"})
    assert explicit.tags == {"job_name": "mine"}
    assert TraceCapture(str(tmp_path), job_id="j", env={}).tags == {}


def test_capture_is_off_without_sink():
    capture = TraceCapture(job_id="j", env={})
    with capture:
        assert _train(capture, 4) == 4
        assert capture.profiler is None and not capture.enabled
    assert capture.committed == [] and capture.failures == 0


# ---------------------------------------------------------------- manifests


def test_capture_from_env_lands_schema_valid_manifests(tmp_path, validator):
    env = {
        "TRACELAKE_SINK": str(tmp_path / "raw"),
        "TRACELAKE_JOB_ID": "unit-job",
        "TRACELAKE_ATTEMPT": "3",
        "TRACELAKE_TAGS": "team=perf,model=mlp",
    }
    capture = TraceCapture(tags={"model": "tiny-mlp"}, wait=1, warmup=1, active=2, repeat=2, env=env)
    with capture:
        assert capture.enabled
        _train(capture, 10)
    assert capture.failures == 0
    assert len(capture.committed) == 2  # repeat=2: two active cycles, two captures
    ranges = []
    for cycle, folder in enumerate(capture.committed):
        rel = Path(folder).relative_to(tmp_path / "raw").as_posix()
        job, attempt, rank, capture_id = LAYOUT.fullmatch(rel).groups()
        assert (job, attempt, rank) == ("unit-job", "3", "00000")
        assert sorted(p.name for p in Path(folder).iterdir()) == ["manifest.json", "trace.json.gz"]

        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        validator.validate(manifest)
        assert manifest["capture_id"] == capture_id and manifest["job_id"] == "unit-job"
        assert (manifest["attempt"], manifest["rank"], manifest["world_size"]) == (3, 0, 1)
        assert manifest["tags"] == {"team": "perf", "model": "tiny-mlp"}  # argument wins over env
        assert manifest["profiler"]["schedule"] == {"skip_first": 0, "wait": 1, "warmup": 1, "active": 2, "repeat": 2}
        assert manifest["profiler"]["record_shapes"] is True and manifest["profiler"]["cycle"] == cycle

        raw = (Path(folder) / "trace.json.gz").read_bytes()
        (entry,) = manifest["files"]
        assert entry == {
            "path": "trace.json.gz",
            "size_bytes": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "kind": "kineto_trace",
        }
        trace = json.loads(gzip.decompress(raw))
        steps = _profiler_steps(trace)
        assert manifest["step_range"] == {"first": steps[0], "last": steps[-1]}
        ranges.append(steps)
    # wait=1, warmup=1, active=2: cycle 0 records steps 2-3, cycle 1 steps 6-7.
    assert ranges == [[2, 3], [6, 7]]


def test_partial_cycle_is_committed_on_exit(tmp_path, validator):
    capture = TraceCapture(str(tmp_path), job_id="j", wait=1, warmup=1, active=5, env={})
    with capture:
        _train(capture, 4)  # exits while recording (steps 2.. not finished)
    (folder,) = capture.committed
    manifest = json.loads((Path(folder) / "manifest.json").read_text())
    validator.validate(manifest)
    trace = json.loads(gzip.decompress((Path(folder) / "trace.json.gz").read_bytes()))
    steps = _profiler_steps(trace)
    assert steps[0] == 2
    assert manifest["step_range"] == {"first": steps[0], "last": steps[-1]}


def test_manifest_is_written_after_the_trace(tmp_path):
    seen: list[tuple[str, bool]] = []

    class RecordingSink(LandingZoneSink):
        def _put(self, fs, local_path, dest):
            seen.append((dest.rsplit("/", 1)[-1], fs.exists(dest.rsplit("/", 1)[0] + "/manifest.json")))
            super()._put(fs, local_path, dest)

    capture = TraceCapture(RecordingSink(str(tmp_path)), job_id="j", env={})
    with capture:
        _train(capture, 6)
    assert seen == [("trace.json.gz", False)]
    assert (Path(capture.committed[0]) / "manifest.json").is_file()


def test_fsspec_uri_sink(validator):
    import fsspec

    capture = TraceCapture("memory://tracelake-unit/raw", job_id="mem-job", env={})
    with capture:
        _train(capture, 6)
    (uri,) = capture.committed
    assert uri.startswith("memory://")
    fs = fsspec.filesystem("memory")
    manifest = json.loads(fs.cat(uri + "/manifest.json"))
    validator.validate(manifest)
    assert hashlib.sha256(fs.cat(uri + "/trace.json.gz")).hexdigest() == manifest["files"][0]["sha256"]


def _good_manifest() -> dict:
    return {
        "schema_version": "1",
        "writer": "tracelake.capture_hooks.torch_profiler",
        "job_id": "j",
        "attempt": 0,
        "rank": 1,
        "local_rank": 1,
        "world_size": 2,
        "node": 0,
        "launcher": "torchrun",
        "capture_id": "h-1-0-5",
        "host": "h",
        "pid": 1,
        "accelerator": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "torch_version": "2.5.1",
        "cuda_version": "12.4",
        "driver_version": "550.54.15",
        "step_range": {"first": 2, "last": 4},
        "profiler": {"name": "torch.profiler", "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}},
        "tags": {"team": "x"},
        "created_at": "2025-05-01T12:00:00.000001Z",
        "files": [{"path": "trace.json.gz", "size_bytes": 10, "sha256": "0" * 64, "kind": "kineto_trace"}],
    }


def _drop(key):
    def edit(m):
        del m[key]

    return edit


@pytest.mark.parametrize(
    "edit",
    [
        _drop("job_id"),
        _drop("files"),
        _drop("step_range"),
        lambda m: m.update(schema_version="2"),
        lambda m: m.update(rank=-1),
        lambda m: m.update(world_size=0),
        lambda m: m.update(attempt="0"),
        lambda m: m.update(job_id="../evil"),
        lambda m: m.update(capture_id="a/b"),
        lambda m: m.update(accelerator="gpu"),
        lambda m: m.update(created_at="yesterday"),
        lambda m: m.update(step_range={"first": 2}),
        lambda m: m.update(tags={"team": 1}),
        lambda m: m.update(files=[]),
        lambda m: m["files"][0].update(sha256="XYZ"),
        lambda m: m["files"][0].update(path="../trace.json.gz"),
        lambda m: m["files"][0].update(path="/abs/trace.json.gz"),
        lambda m: m["files"][0].update(size_bytes=-1),
        lambda m: m["files"][0].pop("kind"),
    ],
)
def test_schema_rejects_broken_manifests(validator, edit):
    good = _good_manifest()
    validator.validate(good)
    broken = copy.deepcopy(good)
    edit(broken)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


# ---------------------------------------------------------------- failures never reach the loop


def _warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "capture_hooks" and r.levelno >= logging.WARNING]


def test_unwritable_sink_does_not_break_the_loop(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    spool = tmp_path / "spool"
    spool.mkdir()
    capture = TraceCapture(
        str(blocker / "raw"),
        job_id="j",
        active=1,
        repeat=2,
        tmp_dir=str(spool),
        spool_dir=str(tmp_path / "spool-base"),
        env={},
    )
    with caplog.at_level(logging.DEBUG, logger="capture_hooks"):
        with capture:
            assert _train(capture, 8) == 8
    assert capture.committed == []
    assert capture.failures == 2  # both cycles failed to land
    assert capture.pending == 2  # kept in the spool for a later upload, not lost
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "export failed" in warnings[0].getMessage()  # logged once
    assert list(spool.iterdir()) == []  # exported temp files cleaned up even on failure


def test_export_failure_is_swallowed(tmp_path, caplog, monkeypatch):
    def broken_export(self, path, *args, **kwargs):
        raise RuntimeError("simulated export failure")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", broken_export)
    capture = TraceCapture(str(tmp_path), job_id="j", env={})
    with caplog.at_level(logging.WARNING, logger="capture_hooks"):
        with capture:
            assert _train(capture, 6) == 6
    assert capture.failures == 1 and capture.committed == []
    assert "simulated export failure" in _warnings(caplog)[0].getMessage()
    assert list(tmp_path.iterdir()) == []  # nothing half-committed


def test_step_and_start_failures_are_swallowed(tmp_path, caplog, monkeypatch):
    def broken_step(self):
        raise RuntimeError("simulated step failure")

    with caplog.at_level(logging.WARNING, logger="capture_hooks"):
        with monkeypatch.context() as m:
            m.setattr(torch.profiler.profile, "step", broken_step)
            capture = TraceCapture(str(tmp_path), job_id="j", env={})
            with capture:
                assert _train(capture, 5) == 5
                assert not capture.enabled  # abandoned after the first failure
            assert capture.failures == 1

        def broken_profile(*args, **kwargs):
            raise RuntimeError("simulated start failure")

        monkeypatch.setattr(torch.profiler, "profile", broken_profile)
        capture = TraceCapture(str(tmp_path), job_id="j", env={})
        with capture:
            assert _train(capture, 3) == 3
        assert capture.failures == 1 and not capture.enabled
    messages = [r.getMessage() for r in _warnings(caplog)]
    assert any("step failed" in m for m in messages) and any("start failed" in m for m in messages)


def test_training_exception_still_propagates(tmp_path):
    capture = TraceCapture(str(tmp_path), job_id="j", env={})
    with pytest.raises(KeyError, match="from the loop"):
        with capture:
            capture.step()
            raise KeyError("from the loop")
    assert capture.profiler is None
