"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest
from kineto_engines import ENGINES


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch):
    """The Kineto parser engine normalize_file uses (it reads $TRACELAKE_KINETO_ENGINE): each test runs on both."""
    monkeypatch.setenv("TRACELAKE_KINETO_ENGINE", request.param)
    return request.param
