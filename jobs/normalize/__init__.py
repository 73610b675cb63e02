"""Normalize raw profiler files into the canonical ``captures``, ``events`` and ``neuron_summary`` tables.

One folder per source format (``kineto/``, ``neuron/``, ``xla/``); ``job.py`` is the Spark job, ``route.py`` sends each file to its parser.
"""
