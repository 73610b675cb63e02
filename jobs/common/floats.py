"""Finite floats: the one NaN/Inf guard for numbers read from profiler outputs and tables."""

from __future__ import annotations

import math

__all__ = ["finite_float"]


def finite_float(v) -> float | None:
    """``v`` as a finite float; ``None`` for missing, boolean, non-numeric, NaN or infinite values."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
