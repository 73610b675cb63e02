"""Analysis of normalized events: per-step and per-rank GPU time breakdowns (HTA 0.5.0 definitions).

Modules: :mod:`~jobs.analyze.breakdown` (``analyze_rank``: STEPS and RANKS rows of one capture),
:mod:`~jobs.analyze.hta_filter` (HTA's loading rules), :mod:`~jobs.analyze.intervals` (merged
intervals), :mod:`~jobs.analyze.kernel_types` (kernel types), :mod:`~jobs.analyze.job` (Spark job).
"""
