"""Normalize raw profiler traces into the canonical `events` / `captures` tables."""
