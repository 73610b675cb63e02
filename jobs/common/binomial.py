"""The binomial tail: the one chance test of "last this often" (the ``straggler_rank`` finding, ``host_health``)."""

from __future__ import annotations

__all__ = ["binomial_tail"]


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ ``k``) for X ~ Binomial(``n``, ``p``): the p-value of a one-sided binomial test of ``k`` successes in
    ``n`` trials against success probability ``p`` (``scipy.stats.binomtest(k, n, p, alternative="greater")``).

    Computed as ``scipy.stats.binom.sf(k - 1, n, p)``; 1.0 for ``k`` ≤ 0.
    """
    from scipy.stats import binom  # heavy: scipy

    return float(binom.sf(k - 1, n, p))
