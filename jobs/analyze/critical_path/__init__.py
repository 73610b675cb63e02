"""Critical path per (job, step): HTA's per-rank graph and longest path, stitched across ranks through collectives.

The ``critical_path`` table.
"""
