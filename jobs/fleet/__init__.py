"""Fleet-wide statistics and regressions over the whole warehouse: ``fleet_stats``, ``fleet_kernels``, ``regressions``.

Runs after analyze, over every job, not only the jobs of one run.
"""
