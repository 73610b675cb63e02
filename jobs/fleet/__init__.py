"""Fleet-wide statistics and regressions over the whole warehouse (``fleet_stats``, ``fleet_kernels``,
``regressions``): :mod:`jobs.fleet.stats`, :mod:`jobs.fleet.regressions`, :mod:`jobs.fleet.job`."""
