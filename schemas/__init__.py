"""Single source of truth for every tracelake table and file format.

Each warehouse table is declared once in :mod:`schemas.tables` as a list of
:class:`schemas.tables.Column` (name, Arrow type, unit, meaning). Arrow schemas, Spark
schemas and the README table reference are all derived from those declarations.
The capture manifest is a versioned JSON Schema (``manifest.v1.json``).
"""

from schemas.tables import (  # noqa: F401
    CAPTURES,
    COLLECTIVES,
    COMM_SITES,
    COVERAGE_STATUSES,
    CRITICAL_PATH,
    EVENTS,
    FINDINGS,
    FLEET_FINDINGS,
    FLEET_KERNELS,
    FLEET_OPS,
    FLEET_STATS,
    FLEET_TABLES,
    HEALTH_KINDS,
    HOST_HEALTH,
    KERNELS,
    NEURON_SUMMARY,
    OP_EFFICIENCY,
    RANKS,
    REGRESSIONS,
    RULE_COVERAGE,
    STAGES,
    STEPS,
    TABLES,
    UTILIZATION_WINDOWS,
    Column,
    Table,
    declared,
    stage_tables,
)
