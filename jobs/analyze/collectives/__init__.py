"""Collective calls across ranks: per-rank NCCL/Gloo calls, matching by (group, sequence), waits, skew and bus bandwidth.

The ``collectives`` table.
"""
