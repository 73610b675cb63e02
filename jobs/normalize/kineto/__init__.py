"""torch.profiler / Kineto Chrome-trace JSON → ``events`` rows: decoding, exact numbers, nesting and ProfilerStep linkage.

``parse.py`` is the entry (``parse_kineto``); ``native.py`` wraps the optional C scanner ``_kineto_scan.c``.
"""
