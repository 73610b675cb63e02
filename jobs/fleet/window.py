"""The window of the fleet insights (``fleet_findings``, ``host_health``): the last ``days`` capture dates
ending at the newest capture date in the warehouse (not the wall clock, so a rebuild gives the same rows)."""

from __future__ import annotations

import pandas as pd

#: Days in the window unless told otherwise.
WINDOW_DAYS = 7


def capture_days(dates: pd.Series) -> pd.Series:
    """Capture dates ``YYYY-MM-DD`` (the ``date`` partition) as timestamps; ``NaT`` for ``unknown``."""
    return pd.to_datetime(dates, format="%Y-%m-%d", errors="coerce")


def check_window_days(window_days: int) -> None:
    """Raises ValueError unless ``window_days`` ≥ 1 (the callers check it before looking at their input)."""
    if window_days < 1:
        raise ValueError(f"window_days must be at least 1, not {window_days}")


def window(days: pd.Series, window_days: int = WINDOW_DAYS) -> tuple[pd.Timestamp, pd.Timestamp] | None:
    """``(start, end)`` of the window over ``days`` (:func:`capture_days`): ``end`` the newest known day,
    ``start`` ``window_days - 1`` days before; ``None`` when no day is known.

    Raises:
        ValueError: ``window_days`` < 1.
    """
    check_window_days(window_days)
    known = days.dropna()
    if not len(known):
        return None
    end = known.max()
    return end - pd.Timedelta(days=window_days - 1), end
