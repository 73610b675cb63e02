"""Errors raised while decoding raw trace files."""

from __future__ import annotations


class TraceError(ValueError):
    """A raw trace file that cannot be ingested and must be quarantined.

    ``str(exc)`` (also ``exc.reason``) names the problem, e.g. ``"truncated gzip stream"`` or
    ``"not valid JSON at byte 1234: ..."``; the caller prefixes the file URI.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
