"""Lenient repair of almost-JSON trace documents (used only after a strict parse failed).

Two defects are seen in real profiler output: non-finite numbers written as bare tokens
(``NaN``, ``Infinity``, ``-Infinity``, ``inf``, ``nan``) and raw control characters inside
strings (unescaped tabs/newlines in names). Both are repaired outside/inside string literals only;
everything else is left byte-for-byte unchanged.
"""

from __future__ import annotations

import re

# A complete string literal, or a bare non-finite token outside strings.
_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"'
    rb"|(?<![A-Za-z0-9_.])-?(?:NaN|nan|NAN|Infinity|infinity|INFINITY|inf|Inf|INF)(?![A-Za-z0-9_])",
    re.S,
)
_CTRL = re.compile(rb"[\x00-\x1f]")


def repair_json(doc: bytes) -> tuple[bytes, list[str]]:
    """Return ``(repaired_document, flags)``.

    Non-finite tokens become ``null`` (flag ``nonfinite_number``); raw control characters inside
    strings become ``\\u00XX`` escapes (flag ``control_characters``). ``flags`` is empty when
    nothing was changed.
    """
    flags: set[str] = set()

    def fix(m: re.Match) -> bytes:
        s = m.group(0)
        if s[:1] == b'"':
            if _CTRL.search(s):
                flags.add("control_characters")
                return _CTRL.sub(lambda c: b"\\u%04x" % c.group(0)[0], s)
            return s
        flags.add("nonfinite_number")
        return b"null"

    out = _TOKEN.sub(fix, doc)
    return out, sorted(flags)
