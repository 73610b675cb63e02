"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Read-only corpus of real traces (../shared/corpus relative to the repo root); never copied into the repo.
CORPUS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def CORPUS() -> Path:
    """Path of ``shared/corpus`` (skips the test when the corpus is not available)."""
    if not CORPUS_DIR.is_dir():
        pytest.skip(f"corpus not found at {CORPUS_DIR}")
    return CORPUS_DIR
