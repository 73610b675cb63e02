"""torch.profiler / Kineto Chrome-trace JSON → ``events`` rows: decoding, exact numbers, nesting and ProfilerStep linkage.

``parse.py`` is the entry (``parse_kineto``: engine choice, decoding and streaming); ``native.py`` wraps the
optional C scanner ``_kineto_scan.c``; ``passes.py`` runs the vectorized normalization passes shared by both
paths; ``linkage.py`` holds the nesting, flow, launch-link and ProfilerStep algorithms they use.
"""
