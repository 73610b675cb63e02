"""The two Kineto parser engines, for the fixture tests (``test_bug_cases.py``, ``test_wild_cases.py``): the C
scanner and the pure-Python reference, which must give equal tables (the ``engine`` fixture is in conftest.py)."""

from __future__ import annotations

import pytest

from jobs.normalize.kineto import native
from jobs.normalize.kineto.parse import parse_kineto

ENGINES = [
    "python",
    pytest.param("native", marks=pytest.mark.skipif(not native.AVAILABLE, reason="native scanner not built")),
]


def parse_both(data: bytes, uri: str = "trace.json", **kw):
    """parse_kineto on the Python reference path and (when built) the C scanner: equal results."""
    ref = parse_kineto(data, uri, engine="python", **kw)
    if native.AVAILABLE:
        nat = parse_kineto(data, uri, engine="native", **kw)
        assert nat.events.equals(ref.events)
        assert nat.meta == ref.meta
    return ref
