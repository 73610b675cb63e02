"""Configuration from the environment, so a job turns capture on without code changes.

Every ``TraceCapture`` argument left at ``None`` is read from here; an explicit argument wins.

| variable | meaning | example |
|---|---|---|
| ``TRACELAKE_SINK`` | landing-zone root; unset = capture off | ``s3://traces/raw``, ``/mnt/landing`` |
| ``TRACELAKE_JOB_ID`` | job id (path-safe) | ``llama-7b-0412`` |
| ``TRACELAKE_ATTEMPT`` | attempt number | ``2`` |
| ``TRACELAKE_TAGS`` | user tags ``k=v,k=v`` (``model`` and ``job_name`` feed fleet statistics) | ``team=perf,model=llama`` |
| ``TRACELAKE_JOB_NAME`` | tag ``job_name``: runs with the same name are compared for regressions (default ``SLURM_JOB_NAME``, else the job id) | ``llama-7b-pretrain`` |
| ``TRACELAKE_SCHEDULE`` | ``torch.profiler.schedule`` in steps | ``wait=5,warmup=1,active=3,repeat=2`` |
| ``TRACELAKE_STORAGE_OPTIONS`` | fsspec options, JSON object | ``{"endpoint_url": "http://127.0.0.1:8333"}`` |
| ``TRACELAKE_BACKGROUND`` | ``0`` uploads on the training thread | ``1`` (default) |
| ``TRACELAKE_SPOOL_DIR`` | spool base folder | default ``{temp}/tracelake-spool`` |
| ``TRACELAKE_SPOOL_MAX_BYTES`` | spool size cap, bytes (suffix K/M/G allowed) | ``2G`` (default) |
| ``TRACELAKE_NEURON`` | ``1``/``0``: force Neuron runtime capture on/off | default: on when torch_neuronx is importable |
| ``TRACELAKE_XLA`` | ``1``/``0``: force torch_xla trace on/off | default: on when torch_xla is importable (and Neuron is off) |

S3 credentials and endpoint come from the usual ``AWS_*`` variables (s3fs / botocore read
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SCHEDULE_KEYS", "env_bool", "env_bytes", "parse_schedule", "parse_storage_options"]

SCHEDULE_KEYS = ("skip_first", "wait", "warmup", "active", "repeat")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def env_bool(env: Mapping[str, str], name: str) -> bool | None:
    """``True``/``False`` for ``1/true/yes/on`` / ``0/false/no/off`` (any case), ``None`` when unset or empty.

    Raises:
        ValueError: any other value (names the variable).
    """
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"environment variable {name}={env.get(name)!r} is not a boolean (use 1/0)")


def env_bytes(env: Mapping[str, str], name: str) -> int | None:
    """A positive byte count with an optional ``K``/``M``/``G``/``T`` suffix (binary); ``None`` when unset.

    Raises:
        ValueError: malformed or not positive (names the variable).
    """
    raw = (env.get(name) or "").strip().upper().removesuffix("B").removesuffix("I")
    if not raw:
        return None
    unit = raw[-1] if raw[-1] in _UNITS else ""
    try:
        value = int(float(raw[: len(raw) - len(unit)]) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"environment variable {name}={env.get(name)!r} is not a byte count") from None
    if value <= 0:
        raise ValueError(f"environment variable {name}={env.get(name)!r} must be positive")
    return value


def parse_schedule(text: str | None) -> dict[str, int]:
    """Parse ``TRACELAKE_SCHEDULE`` (``wait=1,warmup=1,active=3,repeat=1[,skip_first=0]``); ``{}`` when empty.

    Raises:
        ValueError: unknown key, repeated key, or a value that is not a non-negative integer.
    """
    out: dict[str, int] = {}
    if not text or not text.strip():
        return out
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or key not in SCHEDULE_KEYS:
            raise ValueError(f"TRACELAKE_SCHEDULE item {item!r}: use key=value with keys {', '.join(SCHEDULE_KEYS)}")
        if key in out:
            raise ValueError(f"TRACELAKE_SCHEDULE repeats key {key!r}")
        if not value.isdigit():
            raise ValueError(f"TRACELAKE_SCHEDULE {key}={value!r} is not a non-negative integer")
        out[key] = int(value)
    return out


def parse_storage_options(text: str | None) -> dict[str, Any]:
    """Parse ``TRACELAKE_STORAGE_OPTIONS`` (a JSON object); ``{}`` when empty.

    Raises:
        ValueError: not JSON or not an object.
    """
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"TRACELAKE_STORAGE_OPTIONS is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("TRACELAKE_STORAGE_OPTIONS must be a JSON object")
    return value
