"""The capture manifest contract: ``manifest.json`` validated against ``manifest.v{N}.json``.

``capture_hooks`` writes the manifest last, committing a capture; ``jobs.normalize`` validates it
here before trusting its job id, rank and file list.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

import jsonschema

SUPPORTED_VERSIONS = ("1",)


@cache
def manifest_schema(version: str = "1") -> dict:
    """The JSON Schema (draft 2020-12) of manifest ``version``.

    Raises:
        ValueError: for an unknown version.
    """
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unknown manifest schema_version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})")
    return json.loads(resources.files("schemas").joinpath(f"manifest.v{version}.json").read_text())


def validate_manifest(manifest: dict) -> None:
    """Validate a parsed ``manifest.json``.

    Raises:
        ValueError: with the failing field path and message when the manifest does not conform,
            or when its ``schema_version`` is unknown.
    """
    version = str(manifest.get("schema_version", ""))
    schema = manifest_schema(version)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(manifest), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(top level)"
        raise ValueError(f"manifest field {where}: {e.message}")


def validate_tags(tags: dict, version: str = "1") -> None:
    """Validate user tags (``{key: value}``) against the manifest's ``tags`` field: keys of 1-128
    characters from ``[A-Za-z0-9_.:/-]``, string values.

    Raises:
        ValueError: naming the first bad key or value.
    """
    schema = manifest_schema(version)["properties"]["tags"]
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(tags), key=lambda e: list(e.path))
    if errors:
        raise ValueError(f"tag {errors[0].message}")
