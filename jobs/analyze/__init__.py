"""``events`` → ``steps``, ``ranks``, ``kernels``, ``collectives``, ``critical_path``, ``findings``: one folder per analysis family.

``trace/`` builds each rank's model once; ``hta/`` (HTA 0.5.0 breakdowns and statistics), ``collectives/``, ``critical_path/`` and ``findings/`` read it; ``job.py`` is the Spark job.
"""
