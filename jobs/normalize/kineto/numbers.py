"""Exact conversion of trace numbers (µs timestamps, ids) to int64 columns.

Kineto writes ``ts``/``dur`` in microseconds: integers (old absolute epoch µs), floats with up
to 3 fractional digits (ns resolution, relative to ``baseTimeNanoseconds`` or absolute), or
exponent notation. A float64 cannot hold a 16-digit µs value at ns precision
(``1713832237123456.789``), so values are converted on a fast vectorized path only where that
is exact and from the decimal text otherwise.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

#: |µs| below this is converted from float64 on the vectorized path: the value is split into
#: its integer part (exact) and fraction, and a value with <= 3 fractional digits is recovered
#: exactly because the double's error (ulp/2 <= 2**-12 µs) is below a quarter ns. Values whose
#: fraction lands near a rounding tie (sub-ns digits) or that are larger go to the exact path.
FLOAT_EXACT_LIMIT_US = float(2**42)
_I64_MAX = 2**63 - 1
_CTX = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_EVEN)


def decimal_text_to_ns(text: bytes | str) -> int | None:
    """Exact ``round(value_µs * 1000)`` (half to even) of a JSON number's text, as int ns.

    Handles integers, fractions and exponent notation (``1.7138e15``). Returns ``None`` for text
    that is not a finite number.
    """
    if not isinstance(text, str):
        text = bytes(text).decode("ascii", "replace")
    s = text.strip()
    ip, dot, fp = s.partition(".")
    if len(fp) <= 3 and fp.isdigit() and ip.lstrip("-").isdigit():  # the common "123.456" form
        return int(ip + fp.ljust(3, "0")) if ip[:1] != "-" else -int(ip[1:] + fp.ljust(3, "0"))
    try:
        d = decimal.Decimal(s)
    except decimal.InvalidOperation:
        return None
    if not d.is_finite():
        return None
    return int((d * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN, context=_CTX))


def micros_to_ns(
    values: Sequence,
    raw_text: Callable[[np.ndarray], Sequence] | None = None,
    types: set | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Convert decoded µs numbers to exact int64 ns.

    Args:
        values: decoded JSON values (``int``, ``float``, ``None`` or anything else) per position.
        raw_text: called with the positions (int array) whose float value cannot be converted
            exactly (|µs| >= 2**42 with a float type, or sub-ns digits near a rounding tie); must
            return the JSON number text (bytes) of each. ``None``: use the float value.
        types: ``set(map(type, values))`` if the caller already has it.

    Returns:
        ``(ns, valid)``: int64 ns (0 where invalid) and a bool mask of valid (finite, numeric,
        in int64 range) values.
    """
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    if types is None:
        types = set(map(type, values))
    if types <= _INT_TYPES:
        try:
            arr = pa.array(values, type=pa.int64())
        except (OverflowError, pa.ArrowInvalid):  # an integer past int64 (a damaged trace): invalid, as a non-number
            arr = pa.array([v if v is None or -(2**63) <= v < 2**63 else None for v in values], type=pa.int64())
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool) if arr.null_count else np.ones(n, bool)
        v = np.array(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        lim = _I64_MAX // 1000
        big = np.abs(v) > lim
        if big.any():
            valid &= ~big
            v[big] = 0
        return v * 1000, valid
    if types <= _NUM_TYPES:
        try:
            arr = pa.array(values, type=pa.float64()).to_numpy(zero_copy_only=False)
        except (OverflowError, pa.ArrowInvalid):  # an integer past int64 beside floats: one value at a time
            return _objects_to_ns(list(values), raw_text)
        if int in types and np.nanmax(np.abs(arr)) >= 2.0**53:
            return _objects_to_ns(list(values), raw_text)
        return _floats_to_ns(np.asarray(arr, np.float64), raw_text)
    return _objects_to_ns(list(values), raw_text)


_INT_TYPES = {int, type(None)}
_NUM_TYPES = {int, float, type(None)}


def _floats_to_ns(arr: np.ndarray, raw_text) -> tuple[np.ndarray, np.ndarray]:
    """float µs -> ``(ns, valid)``, vectorized; values not exact as floats are decided from their text."""
    n = len(arr)
    a = np.abs(arr)
    finite = np.isfinite(arr)
    fast = finite & (a < FLOAT_EXACT_LIMIT_US)
    ns = np.zeros(n, np.int64)
    valid = fast.copy()
    v = arr[fast] if not fast.all() else arr
    ip = np.floor(v)
    frac_ns = (v - ip) * 1000.0  # v - ip is exact (Sterbenz)
    r = np.rint(frac_ns)
    bound = 500.0 * np.spacing(np.abs(v)) + 1e-6  # max error of frac_ns for <= 3 fractional digits
    tie = np.abs(frac_ns - r) >= 0.5 - bound  # possibly sub-ns digits near a tie: decide from the text
    ns[fast] = ip.astype(np.int64) * 1000 + r.astype(np.int64)
    slow_mask = finite & ~fast
    if tie.any():
        slow_mask[np.flatnonzero(fast)[tie]] = True
        valid &= ~slow_mask
    slow = np.flatnonzero(slow_mask)
    if len(slow):
        if raw_text is not None:
            texts = raw_text(slow)
            for i, t in zip(slow.tolist(), texts):
                x = decimal_text_to_ns(t) if t is not None else None
                if x is not None and -_I64_MAX <= x <= _I64_MAX:
                    ns[i] = x
                    valid[i] = True
        else:
            for i in slow.tolist():
                x = int((decimal.Decimal(float(arr[i])) * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
                if -_I64_MAX <= x <= _I64_MAX:
                    ns[i] = x
                    valid[i] = True
    return ns, valid


def _objects_to_ns(values: list, raw_text) -> tuple[np.ndarray, np.ndarray]:
    """Mixed JSON values (big ints, floats, numeric strings) µs -> ``(ns, valid)``, one at a time."""
    n = len(values)
    ns = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    need_text = []
    for i, v in enumerate(values):
        t = type(v)
        if t is int:
            x = v * 1000
        elif t is float:
            if v != v or v in (float("inf"), float("-inf")):
                continue
            if abs(v) < FLOAT_EXACT_LIMIT_US:
                f, r = _floats_to_ns(np.array([v]), None)
                x = int(f[0])
            else:
                need_text.append(i)
                continue
        elif t is str:
            x = decimal_text_to_ns(v)
            if x is None:
                continue
        else:
            continue
        if -_I64_MAX <= x <= _I64_MAX:
            ns[i] = x
            valid[i] = True
    if need_text:
        idx = np.array(need_text, dtype=np.int64)
        texts = raw_text(idx) if raw_text is not None else [repr(values[i]) for i in need_text]
        for i, t in zip(need_text, texts):
            x = decimal_text_to_ns(t) if t is not None else None
            if x is not None and -_I64_MAX <= x <= _I64_MAX:
                ns[i] = x
                valid[i] = True
    return ns, valid


def to_int64(values: Sequence) -> pa.Array:
    """Integer-valued JSON values -> ``pa.int64`` array (null where absent or not an integer).

    Accepts ints, integral floats and decimal/hex integer strings (``"7"``, ``"0x1f"``); values
    outside int64 become null.
    """
    try:
        return pa.array(values, type=pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    return pa.array([_as_int(v) for v in values], type=pa.int64())


def _as_int(v) -> int | None:
    """One JSON value -> int (ints, integral floats, decimal/hex strings) within int64, else None."""
    t = type(v)
    if t is int:
        x = v
    elif t is float:
        if v != v or v in (float("inf"), float("-inf")) or v != int(v):
            return None
        x = int(v)
    elif t is str:
        s = v.strip()
        try:
            x = int(s, 0) if s[:2].lower() in ("0x", "0o", "0b") else int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return None
            if f != f or f in (float("inf"), float("-inf")) or f != int(f):
                return None
            x = int(f)
    else:
        return None
    return x if -_I64_MAX <= x <= _I64_MAX else None
