"""AWS Neuron profiles (Explorer Parquet, ``neuron-profile`` JSON, system profiles) → ``events`` and ``neuron_summary``.

The device metrics of one profile (MFU, HFU, MBU, engine utilization, device critical path) are computed here, at ingest, where the whole profile is in memory.
"""
