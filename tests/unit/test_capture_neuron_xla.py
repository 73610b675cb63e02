"""Unit tests of the Neuron and XLA capture paths on real profiler output files (../shared/corpus/neuron).

Neuron: a runtime inspect output folder ``{dir}/{instance}_pid_{pid}/`` is built from the real NTFF
device traces of the corpus (inf2, neuron-profile 2.27). The conversion CLI is replaced, in this
module only, by a script on ``PATH`` that records its arguments and writes what ``view`` writes:
Parquet (``Summary.parquet`` from the corpus ``summary`` object) and ``summary-json``. Without the
CLI the capture carries the raw files and ``needs_conversion``.

XLA: ``torch_xla`` is not installed here, so a stand-in ``torch_xla.debug.profiler`` module (in
``sys.modules`` for the test only) writes the corpus xplane sample (``vm.xplane.pb`` +
``vm.trace.json.gz``, the layout ``start_trace``/``stop_trace`` writes) on ``stop_trace``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import types
from pathlib import Path

import jsonschema
import pyarrow.parquet as pq
import pytest
import torch

from capture_hooks import TraceCapture, prepare_neuron_env
from capture_hooks.neuron import NeuronCollector, find_converter

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "schemas" / "manifest.v1.json").read_text())
NEURON_CORPUS = ROOT.parent / "shared" / "corpus" / "neuron"
MATMUL = NEURON_CORPUS / "AnchovyPark__npu_profiling_code" / "matmul"
XPLANE_RUN = NEURON_CORPUS / "generated__jax_cpu_xplane_sample" / "plugins" / "profile" / "2026_11_30_06_33_40"

pytestmark = pytest.mark.skipif(not NEURON_CORPUS.is_dir(), reason=f"corpus not found at {NEURON_CORPUS}")


def _sources_sha256() -> dict[str, str]:
    """sha256 per corpus file, as documented in corpus/neuron/SOURCES.md (not computed by our code)."""
    out = {}
    text = (NEURON_CORPUS / "SOURCES.md").read_text()
    for line in text.splitlines():  # the NTFF/JSON table: | `path` | bytes | `sha256` | ...
        cells = [c.strip().strip("`") for c in line.split("|")]
        if len(cells) > 4 and len(cells[3]) == 64:
            out[Path(cells[1]).name] = cells[3]
    for name, digest in re.findall(r"`([^`]+)` ([0-9a-f]{64})", text):  # the xplane row: `name` sha256; ...
        out[name] = digest
    return out


def _train(capture: TraceCapture, steps: int) -> int:
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        capture.step()
    return steps


def _manifests(landing: Path) -> list[tuple[Path, dict]]:
    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    out = []
    for path in sorted(landing.rglob("manifest.json"), key=lambda p: json.loads(p.read_text())["profiler"]["cycle"]):
        manifest = json.loads(path.read_text())
        validator.validate(manifest)
        for entry in manifest["files"]:  # every listed file landed with the listed bytes
            blob = (path.parent / entry["path"]).read_bytes()
            assert (len(blob), hashlib.sha256(blob).hexdigest()) == (entry["size_bytes"], entry["sha256"])
        out.append((path.parent, manifest))
    return out


# ---------------------------------------------------------------- Neuron

FAKE_CLI = """#!{python}
# Stand-in for neuron-explorer / neuron-profile `view` (test only): records argv, writes what view writes.
import json, os, sys
name = os.path.basename(sys.argv[0])
with open(os.environ["FAKE_NEURON_LOG"], "a") as f:
    f.write(json.dumps([name] + sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_NEURON_FAIL"):
    sys.stderr.write("ERROR: cannot process NTFF without its NEFF\\n")
    sys.exit(3)
args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
summary = json.load(open(os.environ["FAKE_NEURON_JSON"]))["summary"][0]
fmt, out = args["--output-format"], args["--output-file"]
assert os.path.isdir(args["-d"]) and os.listdir(args["-d"]), "input folder must hold the raw files"
if fmt == "parquet":
    import pyarrow as pa, pyarrow.parquet as pq
    os.makedirs(out, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([summary]), os.path.join(out, "Summary.parquet"))
elif fmt == "summary-json":
    json.dump({{"profile_0": summary}}, open(out, "w"))
elif fmt == "json":
    json.dump(json.load(open(os.environ["FAKE_NEURON_JSON"])), open(out, "w"))
"""


@pytest.fixture()
def neuron_out(tmp_path):
    """A runtime inspect output folder: this process's folder with real NTFFs (one in a timestamp subfolder),
    and another process's folder that must not be collected."""
    out = tmp_path / "inspect"
    mine = out / f"i-0123456789abcdef0_pid_{os.getpid()}"
    (mine / "20261130T063340").mkdir(parents=True)
    shutil.copy(MATMUL / "neuron_profile_results" / "profile_128x128x1024.ntff", mine / "profile_128x128x1024.ntff")
    shutil.copy(MATMUL / "neuron_profile_results" / "profile_128x128x520.ntff", mine / "profile_128x128x520.ntff")
    shutil.copy(
        MATMUL / "neuron_profile_results_bucketed" / "profile_bucketed_128x128x2048.ntff",
        mine / "20261130T063340" / "profile_bucketed_128x128x2048.ntff",
    )
    other = out / "i-0123456789abcdef0_pid_1"
    other.mkdir()
    shutil.copy(MATMUL / "neuron_profile_results" / "profile_128x128x520.ntff", other / "x.ntff")
    return out


def _install_cli(tmp_path, monkeypatch, name: str = "neuron-explorer", fail: bool = False) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(FAKE_CLI.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "cli.log"
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_NEURON_LOG", str(log))
    monkeypatch.setenv("FAKE_NEURON_JSON", str(MATMUL / "neuron_profile_results" / "profile_128x128x1024.json"))
    if fail:
        monkeypatch.setenv("FAKE_NEURON_FAIL", "1")
    return log


def _neuron_capture(tmp_path, neuron_out, env=None, **kwargs) -> TraceCapture:
    env = {} if env is None else env
    return TraceCapture(
        str(tmp_path / "landing"),
        job_id="trn-job",
        neuron=True,
        xla=False,
        neuron_output_dir=str(neuron_out),
        spool_dir=str(tmp_path / "spool"),
        env=env,
        wait=1,
        warmup=1,
        active=2,
        **kwargs,
    )


def test_neuron_runtime_env_is_prepared_without_overriding_the_user(tmp_path):
    env = {"NEURON_RT_INSPECT_DEVICE_PROFILE": "1"}
    effective = prepare_neuron_env(str(tmp_path / "out"), "session", env)
    assert (
        env
        == effective
        == {
            "NEURON_RT_INSPECT_ENABLE": "1",
            "NEURON_RT_INSPECT_OUTPUT_DIR": str(tmp_path / "out"),
            "NEURON_RT_INSPECT_DEVICE_PROFILE": "1",
        }
    )  # the user's mode is kept
    assert (tmp_path / "out").is_dir()
    with pytest.raises(ValueError, match="device profile"):
        prepare_neuron_env(str(tmp_path), "everything", {})
    # TraceCapture sets them at construction (before the runtime starts), only when capture is on
    env = {}
    TraceCapture(str(tmp_path / "l"), job_id="j", neuron=True, neuron_output_dir=str(tmp_path / "o"), env=env)
    assert env["NEURON_RT_INSPECT_ENABLE"] == "1" and env["NEURON_RT_INSPECT_DEVICE_PROFILE"] == "session"
    off = {}
    TraceCapture(job_id="j", neuron=True, env=off)
    assert off == {}


def test_neuron_output_is_converted_and_uploaded_with_the_raw_files(tmp_path, monkeypatch, neuron_out):
    log = _install_cli(tmp_path, monkeypatch)
    capture = _neuron_capture(tmp_path, neuron_out)
    with capture:
        assert _train(capture, 5) == 5
    assert capture.failures == 0
    ((folder, manifest),) = _manifests(tmp_path / "landing")

    mine = f"i-0123456789abcdef0_pid_{os.getpid()}"
    kinds = {e["path"]: e["kind"] for e in manifest["files"]}
    assert kinds == {
        "trace.json.gz": "kineto_trace",  # the torch.profiler trace beside them, as usual
        f"neuron/{mine}/raw/profile_128x128x1024.ntff": "neuron_raw",
        f"neuron/{mine}/raw/profile_128x128x520.ntff": "neuron_raw",
        f"neuron/{mine}/raw/20261130T063340/profile_bucketed_128x128x2048.ntff": "neuron_raw",
        f"neuron/{mine}/parquet/Summary.parquet": "neuron_parquet",
        f"neuron/{mine}/summary.json": "neuron_summary_json",
    }
    # raw files landed byte-identical to the corpus (sha256 from SOURCES.md)
    documented = _sources_sha256()
    for entry in manifest["files"]:
        if entry["kind"] == "neuron_raw":
            assert entry["sha256"] == documented[Path(entry["path"]).name]
    assert manifest["needs_conversion"] is False and manifest["accelerator"] == "neuron"
    assert manifest["neuron"]["converter"] == "neuron-explorer" and manifest["neuron"]["conversion_errors"] == []
    assert manifest["neuron"]["folders"] == [{"name": mine, "raw_files": 3, "converted": True}]
    assert manifest["neuron"]["device_profile"] == "session"
    # converted outputs carry the profile's numbers (SOURCES.md: total_time 0.001867629615 s)
    summary_row = pq.read_table(folder / "neuron" / mine / "parquet" / "Summary.parquet").to_pylist()[0]
    assert summary_row["total_time"] == pytest.approx(0.001867629615, rel=1e-9)
    assert next(iter(json.loads((folder / "neuron" / mine / "summary.json").read_text()).values()))[
        "total_time"
    ] == pytest.approx(0.001867629615, rel=1e-9)
    # the CLI ran on the copied raw folder, once per format
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[:3] + c[4:7] for c in calls] == [
        ["neuron-explorer", "view", "-d", "--output-format", "parquet", "--output-file"],
        ["neuron-explorer", "view", "-d", "--output-format", "summary-json", "--output-file"],
    ]
    assert all(c[3].endswith(f"/neuron/{mine}/raw") for c in calls)
    gzip.decompress((folder / "trace.json.gz").read_bytes())


def test_without_the_cli_raw_files_are_uploaded_and_marked_needs_conversion(tmp_path, monkeypatch, neuron_out):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert find_converter() is None
    capture = _neuron_capture(tmp_path, neuron_out)
    with capture:
        _train(capture, 5)
    ((_, manifest),) = _manifests(tmp_path / "landing")
    assert manifest["needs_conversion"] is True
    assert manifest["neuron"]["converter"] is None
    assert sorted(e["kind"] for e in manifest["files"]) == ["kineto_trace"] + ["neuron_raw"] * 3


def test_failed_conversion_keeps_the_raw_files_and_says_why(tmp_path, monkeypatch, neuron_out):
    _install_cli(tmp_path, monkeypatch, fail=True)
    capture = _neuron_capture(tmp_path, neuron_out)
    with capture:
        _train(capture, 5)
    ((_, manifest),) = _manifests(tmp_path / "landing")
    assert manifest["needs_conversion"] is True
    assert sorted(e["kind"] for e in manifest["files"]) == ["kineto_trace"] + ["neuron_raw"] * 3
    errors = manifest["neuron"]["conversion_errors"]
    assert len(errors) == 2 and all("exited with 3" in e and "without its NEFF" in e for e in errors)


def test_legacy_neuron_profile_cli_gives_json(tmp_path, monkeypatch, neuron_out):
    _install_cli(tmp_path, monkeypatch, name="neuron-profile")
    capture = _neuron_capture(tmp_path, neuron_out)
    with capture:
        _train(capture, 5)
    ((folder, manifest),) = _manifests(tmp_path / "landing")
    assert manifest["needs_conversion"] is False and manifest["neuron"]["converter"] == "neuron-profile"
    (legacy,) = [e for e in manifest["files"] if e["kind"] == "neuron_json"]
    assert json.loads((folder / legacy["path"]).read_text())["summary"][0]["total_time"] == pytest.approx(
        0.001867629615
    )


def test_only_changed_neuron_folders_are_collected_again(tmp_path, monkeypatch, neuron_out):
    collector = NeuronCollector(str(neuron_out))
    (first,) = collector.plan()
    assert first["name"].endswith(f"_pid_{os.getpid()}") and len(first["files"]) == 3
    assert collector.plan() == []  # nothing new since
    new = neuron_out / first["name"] / "ntrace.pb"
    new.write_bytes(b"\x00" * 16)
    (again,) = collector.plan()
    assert len(again["files"]) == 4  # the whole folder again: a snapshot the converter can read


# ---------------------------------------------------------------- XLA


class FakeXlaProfiler(types.ModuleType):
    """``torch_xla.debug.profiler`` stand-in: ``stop_trace`` writes the corpus xplane run into the log dir."""

    def __init__(self, fail_start: bool = False) -> None:
        super().__init__("torch_xla.debug.profiler")
        self.calls: list[tuple[str, str | None]] = []
        self.log_dir: str | None = None
        self.fail_start = fail_start

    def start_trace(self, log_dir: str) -> None:
        if self.fail_start:
            raise RuntimeError("profiler session already running (test)")
        assert self.log_dir is None, "start_trace while a trace is running"
        self.calls.append(("start", log_dir))
        self.log_dir = log_dir

    def stop_trace(self) -> None:
        assert self.log_dir is not None, "stop_trace without start_trace"
        self.calls.append(("stop", None))
        run = Path(self.log_dir) / "plugins" / "profile" / XPLANE_RUN.name
        run.mkdir(parents=True)
        for f in XPLANE_RUN.iterdir():
            shutil.copy(f, run / f.name)
        self.log_dir = None


@pytest.fixture()
def fake_xla(monkeypatch):
    def install(**kwargs) -> FakeXlaProfiler:
        prof = FakeXlaProfiler(**kwargs)
        torch_xla, debug = types.ModuleType("torch_xla"), types.ModuleType("torch_xla.debug")
        torch_xla.debug, debug.profiler = debug, prof
        for name, mod in (("torch_xla", torch_xla), ("torch_xla.debug", debug), ("torch_xla.debug.profiler", prof)):
            monkeypatch.setitem(sys.modules, name, mod)
        return prof

    return install


def test_xla_trace_wraps_each_profiled_window(tmp_path, fake_xla):
    prof = fake_xla()
    capture = TraceCapture(
        str(tmp_path / "landing"),
        job_id="xla-job",
        xla=True,
        neuron=False,
        spool_dir=str(tmp_path / "spool"),
        env={"PJRT_DEVICE": "TPU"},
        wait=1,
        warmup=1,
        active=2,
        repeat=2,
    )
    with capture:
        assert _train(capture, 10) == 10
    assert capture.failures == 0
    assert [c[0] for c in prof.calls] == ["start", "stop", "start", "stop"]
    documented = _sources_sha256()
    captures = _manifests(tmp_path / "landing")
    assert [m["step_range"] for _, m in captures] == [{"first": 2, "last": 3}, {"first": 6, "last": 7}]
    for _folder, manifest in captures:
        kinds = {e["path"]: e["kind"] for e in manifest["files"]}
        run = f"xla/plugins/profile/{XPLANE_RUN.name}"
        assert kinds == {
            "trace.json.gz": "kineto_trace",
            f"{run}/vm.xplane.pb": "xplane",
            f"{run}/vm.trace.json.gz": "xla_trace_json",
        }
        by_path = {e["path"]: e for e in manifest["files"]}
        assert by_path[f"{run}/vm.xplane.pb"]["sha256"] == documented["vm.xplane.pb"]  # SOURCES.md
        assert by_path[f"{run}/vm.trace.json.gz"]["sha256"] == documented["vm.trace.json.gz"]
        assert manifest["xla"] == {"files": 2} and manifest["accelerator"] == "xla"
        assert "needs_conversion" not in manifest
    # the XLA log dir was inside the spool, and nothing is left there
    assert all(str(tmp_path / "spool") in c[1] for c in prof.calls if c[0] == "start")
    assert [p for p in (tmp_path / "spool").rglob("*") if p.is_file()] == []


def test_xla_failure_keeps_the_torch_trace_and_turns_xla_off(tmp_path, fake_xla, caplog):
    fake_xla(fail_start=True)
    capture = TraceCapture(
        str(tmp_path / "landing"),
        job_id="xla-job",
        xla=True,
        neuron=False,
        spool_dir=str(tmp_path / "spool"),
        env={},
        wait=1,
        warmup=1,
        active=2,
        repeat=2,
    )
    with caplog.at_level("WARNING", logger="capture_hooks"):
        with capture:
            assert _train(capture, 10) == 10
    assert capture.failures == 1 and not capture.xla
    captures = _manifests(tmp_path / "landing")
    assert len(captures) == 2
    assert all([e["kind"] for e in m["files"]] == ["kineto_trace"] for _, m in captures)
    assert sum("xla failed" in r.getMessage() for r in caplog.records) == 1


def test_xla_is_off_by_default_without_torch_xla_and_when_neuron_is_on(tmp_path):
    assert not TraceCapture(str(tmp_path), job_id="j", env={}).xla  # torch_xla is not installed here
    assert TraceCapture(str(tmp_path), job_id="j", env={"TRACELAKE_XLA": "1"}).xla
    assert not TraceCapture(str(tmp_path), job_id="j", neuron=True, env={}, neuron_output_dir=str(tmp_path)).xla
