"""Path-safe ids: the checks every id passes before it becomes a folder, partition value or filter literal.

Used by landing-zone discovery (:mod:`jobs.landing.discover`: job and capture ids, dates, int32
attempt/rank from manifests and paths) and by the later stages that put an id into a path or an
MLflow filter (normalize, analyze, publish). Patterns are used with ``fullmatch`` (``$`` would accept a
trailing newline); ASCII classes only.
"""

from __future__ import annotations

import datetime as _dt
import re

__all__ = ["DiscoveryError", "INT32_MAX", "safe_id", "safe_date", "safe_index", "slug", "shown"]

_SAFE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+@-]{0,199}")
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_INDEX_RE = re.compile(r"[0-9]{1,10}")
#: attempt, rank and world_size are int32 columns: larger values would fail the whole batch's write.
INT32_MAX = 2**31 - 1


class DiscoveryError(ValueError):
    """A landing-zone path, manifest or id that cannot be used (names the path and the problem).

    Raised by the checks of this module and by :mod:`jobs.landing.discover`.
    """


def shown(value) -> str:
    """``repr`` of a hostile value for an error message, cut to 80 characters (long ids stay readable)."""
    r = repr(value)
    return r if len(r) <= 80 else f"{r[:72]}… ({len(str(value))} characters)"


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: every control or non-printable character (ESC, OSC, BEL, CR, …) as its
    Python escape (``\\x1b``), the rest as is."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def safe_id(value: str, what: str, where: str) -> str:
    """Return ``value`` if it is safe as a path segment and partition value, else raise.

    Safe: 1-200 ASCII characters from ``[A-Za-z0-9._=+@-]``, starting with a letter or digit, without
    ``..`` (so no ``/``, ``\\``, ``%``, NUL, newline, whitespace or Unicode look-alikes).

    Raises:
        DiscoveryError: naming ``where`` (file or URI) when ``value`` contains a path separator,
            ``..`` or other characters that could escape the landing zone or warehouse.
    """
    value = str(value)
    if not _SAFE_ID_RE.fullmatch(value) or ".." in value:
        raise DiscoveryError(
            f"{where}: unsafe {what} {shown(value)} "
            "(allowed: 1-200 of letters, digits, . _ = + @ -, starting with a letter or digit; no '..')"
        )
    return value


def safe_date(value: str, where: str, what: str = "date") -> str:
    """Return ``value`` if it is a calendar date ``YYYY-MM-DD`` (ASCII digits), else raise :class:`DiscoveryError`
    naming ``where``, ``what`` and the value."""
    text = str(value)
    try:
        if _DATE_RE.fullmatch(text):
            _dt.date.fromisoformat(text)
            return text
    except ValueError:
        pass
    raise DiscoveryError(f"{where}: {what} {shown(text)} is not a calendar date YYYY-MM-DD")


def safe_index(value, what: str, where: str, minimum: int = 0) -> int:
    """``value`` (an int, or ASCII digits) as an int in ``[minimum, INT32_MAX]``, else raise.

    ``int()`` alone would accept ``" 3"``, ``"+3"``, ``"1_0"`` and non-ASCII digits; booleans are refused.

    Raises:
        DiscoveryError: naming ``where``, ``what`` and the value.
    """
    if isinstance(value, bool):
        n = None
    elif isinstance(value, int):
        n = value
    elif isinstance(value, str) and _INDEX_RE.fullmatch(value):
        n = int(value)
    else:
        n = None
    if n is None or not minimum <= n <= INT32_MAX:
        raise DiscoveryError(f"{where}: {what} {shown(value)} is not an integer in [{minimum}, {INT32_MAX}]")
    return n


def slug(text: str) -> str:
    """A path-safe id from free text (folder names of bare traces): runs of unsafe chars become ``-``.

    The result always passes :func:`safe_id`: ASCII only, starts with a letter or digit, no ``..``,
    at most 200 characters; ``default`` when nothing is left.
    """
    s = re.sub(r"[^A-Za-z0-9._+@=-]+", "-", str(text))
    while ".." in s:
        s = s.replace("..", ".")
    s = s.lstrip("-._+@=")[:200].rstrip("-.")
    return s or "default"
