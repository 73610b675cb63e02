"""Read errors of the landing zone: the object's own problem, or a store that cannot be reached.

An object that is gone or forbidden (``FileNotFoundError``, ``PermissionError``, …) is a problem of that
capture: the caller quarantines it with the reason and goes on with the others. Any other error while
reading (connection refused, timeout, a truncated response, 5xx after the client's own retries) says
nothing about the file: the store is unavailable. :func:`read_problem` then raises
:class:`LandingUnavailable`, which fails the stage, so that its retry reads everything again; an outage
never turns good captures into quarantined rows.
"""

from __future__ import annotations

#: Read errors that belong to the object, not to the store: the capture is quarantined with the reason.
OBJECT_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


class LandingUnavailable(OSError):
    """The landing zone could not be read (not a problem of the file): the stage fails and is retried."""


def listing_failed(raw_root: str, exc: BaseException) -> LandingUnavailable:
    """The error for a store that failed while ``raw_root`` was being listed (raise it ``from exc``)."""
    return LandingUnavailable(
        f"{raw_root}: the landing zone cannot be listed ({type(exc).__name__}: {exc}); "
        "retry when the store answers again"
    )


def read_problem(uri: str, exc: BaseException) -> str:
    """The quarantine reason for an error raised while reading ``uri``, when the error is the object's own.

    Returns:
        ``"cannot read file: <type>: <message>"`` for :data:`OBJECT_ERRORS`.

    Raises:
        LandingUnavailable: for every other error (the store is unreachable or failing), naming ``uri``;
            chained to ``exc``.
    """
    if isinstance(exc, OBJECT_ERRORS):
        return f"cannot read file: {type(exc).__name__}: {exc}"
    raise LandingUnavailable(
        f"{uri}: the landing zone cannot be read ({type(exc).__name__}: {exc}); nothing was quarantined, "
        "retry when the store answers again"
    ) from exc
