"""AWS Neuron (Trainium / Inferentia) runtime profiles: capture settings, collection, conversion.

Source of every setting: Neuron Explorer docs ``tools/neuron-explorer/environment-variables.rst`` and
``how-to-profile-workload.rst`` (summarized in ``reference/neuron_profiles.md`` §1.2-1.3):

- ``NEURON_RT_INSPECT_ENABLE=1`` turns the runtime inspector on (system profile on by default);
- ``NEURON_RT_INSPECT_OUTPUT_DIR`` is where it writes (docs default ``./output``);
- ``NEURON_RT_INSPECT_DEVICE_PROFILE`` selects device profiles: ``0`` off, ``1``/``model`` the first
  execution of each NEFF per core (synchronous execution only), ``session`` all device activity per
  core in one NTFF (needed for asynchronous / PJRT execution, which torch-neuronx training uses).

The runtime reads these when it starts, i.e. at the first use of a Neuron device, so they must be
set before that (:func:`prepare_runtime_env`; ``TraceCapture`` calls it when it is constructed).

Output: one folder per process, ``{output_dir}/{instance-id}_pid_{pid}/`` (NTFF, NEFF, ``*.pb``
system trace files; with native PyTorch profiling a ``{timestamp}/`` level below it). The raw
files are proprietary: only the ``neuron-explorer`` CLI (or the older ``neuron-profile``) can read
them. When one of them is on ``PATH`` the collected folder is converted with
``view -d DIR --output-format parquet`` (Explorer Parquet, one file per table) and
``--output-format summary-json`` (``neuron-profile``: ``json`` and ``summary-json``, it has no
Parquet); otherwise the raw files are uploaded alone and the manifest says ``needs_conversion``.

Standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, MutableMapping
from typing import Any

from capture_hooks.sink import make_path_safe

__all__ = [
    "CONVERTERS",
    "DEVICE_PROFILE_MODES",
    "NeuronCollector",
    "find_converter",
    "materialize",
    "neuron_available",
    "prepare_runtime_env",
]

logger = logging.getLogger("capture_hooks")

#: CLI names tried in order (Neuron Explorer first; neuron-profile reached end of support in 2.29/2.30).
CONVERTERS = ("neuron-explorer", "neuron-profile")
#: Accepted values of ``NEURON_RT_INSPECT_DEVICE_PROFILE`` (docs environment-variables.rst).
DEVICE_PROFILE_MODES = ("0", "1", "model", "session")
DEFAULT_DEVICE_PROFILE = "session"
_STDERR_TAIL = 2000


def neuron_available() -> bool:
    """True when ``torch_neuronx`` is importable (checked without importing it)."""
    try:
        return importlib.util.find_spec("torch_neuronx") is not None
    except (ImportError, ValueError):
        return False


def default_output_dir(job_id: str) -> str:
    """Default inspect output folder: ``{system temp}/tracelake-neuron/{job_id}``."""
    return os.path.join(tempfile.gettempdir(), "tracelake-neuron", job_id)


def prepare_runtime_env(
    output_dir: str,
    device_profile: str = DEFAULT_DEVICE_PROFILE,
    env: MutableMapping[str, str] | None = None,
) -> dict[str, str]:
    """Set the Neuron runtime inspect variables in ``env`` (default ``os.environ``), keeping user values.

    Sets ``NEURON_RT_INSPECT_ENABLE=1``, ``NEURON_RT_INSPECT_OUTPUT_DIR=output_dir`` and
    ``NEURON_RT_INSPECT_DEVICE_PROFILE=device_profile`` unless the variable is already set (an
    explicit user setting wins). Creates the output folder. Must run before the Neuron runtime
    starts (first Neuron device use) to have any effect.

    Returns:
        The effective values of the three variables.

    Raises:
        ValueError: ``device_profile`` is not one of :data:`DEVICE_PROFILE_MODES`.
    """
    if device_profile not in DEVICE_PROFILE_MODES:
        raise ValueError(f"neuron device profile {device_profile!r} must be one of {DEVICE_PROFILE_MODES}")
    env = os.environ if env is None else env
    env.setdefault("NEURON_RT_INSPECT_ENABLE", "1")
    env.setdefault("NEURON_RT_INSPECT_OUTPUT_DIR", output_dir)
    env.setdefault("NEURON_RT_INSPECT_DEVICE_PROFILE", device_profile)
    try:
        os.makedirs(env["NEURON_RT_INSPECT_OUTPUT_DIR"], exist_ok=True)
    except OSError:
        logger.debug("tracelake capture: cannot create %s", env["NEURON_RT_INSPECT_OUTPUT_DIR"], exc_info=True)
    return {
        k: env[k]
        for k in ("NEURON_RT_INSPECT_ENABLE", "NEURON_RT_INSPECT_OUTPUT_DIR", "NEURON_RT_INSPECT_DEVICE_PROFILE")
    }


def _file_state(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class NeuronCollector:
    """Finds the inspect output folders of this process that changed since the last collection.

    Args:
        output_dir: the inspect output folder (``NEURON_RT_INSPECT_OUTPUT_DIR``).
        pid: process whose folders to collect (default: this process; the Neuron runtime runs in it).

    A folder is collected whole (a self-contained snapshot that the converter can read) whenever any
    of its files is new or changed since the previous :meth:`plan`; unchanged folders are skipped.
    """

    def __init__(self, output_dir: str, pid: int | None = None) -> None:
        self.output_dir = output_dir
        self.pid = os.getpid() if pid is None else pid
        self._seen: dict[str, tuple[int, int]] = {}

    def folders(self) -> list[str]:
        """Names of ``*_pid_{pid}`` folders in the output folder (sorted)."""
        suffix = f"_pid_{self.pid}"
        try:
            names = os.listdir(self.output_dir)
        except OSError:
            return []
        return sorted(n for n in names if n.endswith(suffix) and os.path.isdir(os.path.join(self.output_dir, n)))

    def plan(self) -> list[dict[str, Any]]:
        """The folders to collect now: ``[{"name", "dir", "files": [relative paths]}]``.

        Only lists files (cheap: runs on the training thread); copying happens in the upload worker.
        """
        out = []
        for name in self.folders():
            folder = os.path.join(self.output_dir, name)
            files, changed = [], False
            for parent, _, names in os.walk(folder):
                for fname in names:
                    path = os.path.join(parent, fname)
                    state = _file_state(path)
                    if state is None:
                        continue
                    files.append(os.path.relpath(path, folder))
                    if self._seen.get(path) != state:
                        changed = True
                        self._seen[path] = state
            if files and changed:
                out.append({"name": name, "dir": folder, "files": sorted(files)})
        return out


def find_converter(path: str | None = None) -> tuple[str, str] | None:
    """``(name, executable)`` of the first :data:`CONVERTERS` CLI on ``path`` (default ``$PATH``), else ``None``."""
    for name in CONVERTERS:
        exe = shutil.which(name, path=path)
        if exe:
            return name, exe
    return None


def _safe_rel(rel: str) -> str:
    return "/".join(make_path_safe(part) for part in rel.replace(os.sep, "/").split("/") if part not in ("", "."))


def _walk_files(root: str) -> list[str]:
    out = []
    for parent, _, names in os.walk(root):
        for fname in names:
            out.append(os.path.relpath(os.path.join(parent, fname), root).replace(os.sep, "/"))
    return sorted(out)


def _run(cmd: list[str], cwd: str, timeout_s: float) -> tuple[bool, str, str]:
    """Run a converter command; ``(ok, stdout, error text)``. Never raises."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False, "", f"{' '.join(cmd[:2])} timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return False, "", f"{cmd[0]} could not be run: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "")[-_STDERR_TAIL:]
        return (
            False,
            proc.stdout or "",
            f"{os.path.basename(cmd[0])} {' '.join(cmd[1:2])} exited with {proc.returncode}: {tail.strip()}",
        )
    return True, proc.stdout or "", ""


def _json_from_stdout(text: str) -> Any | None:
    """Some tool versions print log lines before the JSON (neuron_profiles.md §2.2): parse from the first '{'."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        return json.loads(text[start:])
    except ValueError:
        return None


def _convert(
    converter: tuple[str, str], raw_dir: str, out_dir: str, timeout_s: float
) -> tuple[list[tuple[str, str]], bool, list[str]]:
    """Convert one raw folder; returns (files relative to out_dir with kinds, primary ok, errors)."""
    name, exe = converter
    files: list[tuple[str, str]] = []
    errors: list[str] = []
    os.makedirs(out_dir, exist_ok=True)
    if name == "neuron-explorer":
        primary, primary_kind = "parquet", "neuron_parquet"
    else:  # neuron-profile: no Parquet; legacy full JSON
        primary, primary_kind = "json", "neuron_json"
    primary_dir = os.path.join(out_dir, primary)
    shutil.rmtree(primary_dir, ignore_errors=True)
    os.makedirs(primary_dir)
    target = primary_dir if primary == "parquet" else os.path.join(primary_dir, "profile.json")
    ok, _, err = _run(
        [exe, "view", "-d", raw_dir, "--output-format", primary, "--output-file", target],
        cwd=primary_dir,
        timeout_s=timeout_s,
    )
    produced = _walk_files(primary_dir)
    primary_ok = ok and bool(produced)
    if not ok:
        errors.append(err)
    elif not produced:
        errors.append(f"{name} view --output-format {primary} wrote no files")
    for rel in produced:
        kind = primary_kind if primary == "json" or rel.endswith(".parquet") else "neuron_converted"
        files.append((f"{primary}/{rel}", kind))

    summary = os.path.join(out_dir, "summary.json")
    ok, stdout, err = _run(
        [exe, "view", "-d", raw_dir, "--output-format", "summary-json", "--output-file", summary],
        cwd=out_dir,
        timeout_s=timeout_s,
    )
    if ok and not os.path.isfile(summary):
        parsed = _json_from_stdout(stdout)
        if parsed is not None:
            with open(summary, "w", encoding="utf-8") as f:
                json.dump(parsed, f)
    if ok and os.path.isfile(summary):
        files.append(("summary.json", "neuron_summary_json"))
    elif not ok:
        errors.append(err)
    else:
        errors.append(f"{name} view --output-format summary-json wrote no summary")
    return files, primary_ok, errors


def materialize(
    sources: list[Mapping[str, Any]],
    entry_dir: str,
    *,
    convert: bool = True,
    timeout_s: float = 900.0,
    path: str | None = None,
) -> tuple[list[tuple[str, str]], dict[str, Any], bool]:
    """Copy planned Neuron folders into ``entry_dir/neuron/`` and convert them (upload worker side).

    Layout inside the capture folder: ``neuron/{folder}/raw/...`` (kind ``neuron_raw``, the files
    as the runtime wrote them), ``neuron/{folder}/parquet/*.parquet`` (``neuron_parquet``),
    ``neuron/{folder}/json/...`` (``neuron_json``, neuron-profile only),
    ``neuron/{folder}/summary.json`` (``neuron_summary_json``). Path segments are made path-safe.

    Args:
        sources: :meth:`NeuronCollector.plan` output.
        entry_dir: the spool entry folder.
        convert: run the converter CLI when one is found on ``path``.
        timeout_s: per converter command.
        path: search path for the CLI (default ``$PATH``).

    Returns:
        ``(files, info, needs_conversion)``: ``files`` are ``(name relative to entry_dir, kind)``;
        ``info`` is the manifest's ``neuron`` object (folders, converter, errors);
        ``needs_conversion`` is True when a raw folder was not converted to the primary open format.
        Files that vanished before they could be copied are skipped (listed in ``info["missing"]``).
    """
    converter = find_converter(path) if convert else None
    files: list[tuple[str, str]] = []
    folders_info = []
    errors: list[str] = []
    missing: list[str] = []
    needs_conversion = False
    for src in sources:
        folder = make_path_safe(str(src["name"]))
        base = os.path.join(entry_dir, "neuron", folder)
        raw_dir = os.path.join(base, "raw")
        shutil.rmtree(base, ignore_errors=True)
        copied = 0
        for rel in src["files"]:
            safe = _safe_rel(rel)
            dest = os.path.join(raw_dir, *safe.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            try:
                shutil.copy2(os.path.join(src["dir"], rel), dest)
            except FileNotFoundError:
                missing.append(f"{src['name']}/{rel}")
                continue
            files.append((f"neuron/{folder}/raw/{safe}", "neuron_raw"))
            copied += 1
        converted = False
        if copied and converter is not None:
            conv_files, converted, conv_errors = _convert(converter, raw_dir, base, timeout_s)
            files.extend((f"neuron/{folder}/{rel}", kind) for rel, kind in conv_files)
            errors.extend(f"{src['name']}: {e}" for e in conv_errors)
        if copied and not converted:
            needs_conversion = True
        folders_info.append({"name": folder, "raw_files": copied, "converted": converted})
    info: dict[str, Any] = {
        "folders": folders_info,
        "converter": converter[0] if converter else None,
        "conversion_errors": errors,
    }
    if missing:
        info["missing"] = missing
    return files, info, needs_conversion
