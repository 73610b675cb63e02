"""Holistic Trace Analysis 0.5.0 definitions: temporal breakdown, idle time, kernel, launch, queue and memcpy statistics.

Per rank and step; the ``steps``, ``ranks`` and ``kernels`` tables.
"""
