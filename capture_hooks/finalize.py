"""Turn a staged spool entry into a finished capture folder (upload worker side).

The training thread only exports and lists files; the slow parts run here, off the loop:

1. gzip the exported Kineto trace (``trace.json`` -> ``trace.json.gz``, gzip level 1: on a 3 MB
   torch.profiler trace about half the CPU time of level 6 for a ~1.5x larger file, still ~10x
   smaller than the JSON; the CPU is taken from the training job, the bytes from the store);
2. copy and convert the planned Neuron folders (:func:`capture_hooks.neuron.materialize`);
3. hash every file (:func:`capture_hooks.manifest.file_entry`) and write ``manifest.json``.

Each step can be redone after a crash; ``manifest.json`` present in the entry means it is finished.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from typing import Any

from capture_hooks.manifest import encode_manifest, file_entry
from capture_hooks.neuron import materialize
from capture_hooks.sink import MANIFEST_NAME, CaptureUpload, check_capture_file_name, check_relative_dir
from capture_hooks.spool import read_meta, write_bytes_atomic

__all__ = ["GZIP_LEVEL", "finalize_entry"]

GZIP_LEVEL = 1
_CHUNK = 1 << 20


def _gzip_file(src: str, dest: str) -> None:
    tmp = f"{dest}.part"
    with (
        open(src, "rb") as fin,
        open(tmp, "wb") as raw,
        gzip.GzipFile(
            filename=os.path.basename(src), mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0
        ) as fout,
    ):
        shutil.copyfileobj(fin, fout, _CHUNK)
    os.replace(tmp, dest)
    os.remove(src)


def finalize_entry(entry: str, *, convert_neuron: bool = True, conversion_timeout_s: float = 900.0) -> CaptureUpload:
    """Finish the spool entry at ``entry`` and return what to upload.

    Returns:
        A :class:`~capture_hooks.sink.CaptureUpload` whose files are the entry's files (local paths)
        in manifest order and whose ``manifest`` is the final ``manifest.json`` bytes.

    Raises:
        OSError, ValueError: the entry is unreadable or incomplete (names the entry), or its folder or a
            file name is not path-safe (:func:`~capture_hooks.sink.check_relative_dir`).
    """
    meta = read_meta(entry)
    relative_dir = check_relative_dir(meta["relative_dir"])  # a tampered entry never lands outside the sink
    manifest_path = os.path.join(entry, MANIFEST_NAME)
    if os.path.isfile(manifest_path):  # finished before (e.g. upload failed afterwards)
        with open(manifest_path, "rb") as f:
            manifest_bytes = f.read()
        listed = json.loads(manifest_bytes)["files"]
        for e in listed:
            check_capture_file_name(e["path"])
        return CaptureUpload(
            relative_dir, tuple((os.path.join(entry, *e["path"].split("/")), e["path"]) for e in listed), manifest_bytes
        )

    named: list[tuple[str, str]] = []
    for spec in meta.get("files", []):
        name, kind = check_capture_file_name(spec["name"]), spec["kind"]
        if spec.get("gzip"):
            src, gz = os.path.join(entry, name), os.path.join(entry, name + ".gz")
            if os.path.isfile(src):
                _gzip_file(src, gz)
            elif not os.path.isfile(gz):
                raise FileNotFoundError(f"spool entry {entry}: {name} is missing")
            name += ".gz"
        elif not os.path.isfile(os.path.join(entry, *name.split("/"))):
            raise FileNotFoundError(f"spool entry {entry}: {name} is missing")
        named.append((name, kind))

    manifest: dict[str, Any] = dict(meta["manifest"])
    neuron = meta.get("neuron")
    if neuron is not None:
        files, info, needs_conversion = materialize(
            neuron.get("sources", []),
            entry,
            convert=convert_neuron and neuron.get("convert", True),
            timeout_s=conversion_timeout_s,
        )
        named.extend(files)
        manifest["needs_conversion"] = needs_conversion
        manifest["neuron"] = {**neuron.get("settings", {}), **info}
    if meta.get("xla") is not None:
        manifest["xla"] = dict(meta["xla"])

    entries = [file_entry(os.path.join(entry, *name.split("/")), name, kind) for name, kind in named]
    manifest["files"] = entries
    manifest_bytes = encode_manifest(manifest)
    write_bytes_atomic(manifest_path, manifest_bytes)
    return CaptureUpload(relative_dir, tuple((os.path.join(entry, *n.split("/")), n) for n, _ in named), manifest_bytes)
