"""The test suite's own layout: pytest imports test files by basename (no packages under ``tests/``), so two
files with one basename make the whole run stop at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_file_basenames_are_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert not [n for n, k in names.items() if k > 1], f"test files sharing a basename: {names.most_common(3)}"
