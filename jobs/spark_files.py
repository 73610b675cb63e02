"""A Spark Python data source over a list of Parquet data files read with pyarrow: how Spark reads a Delta table's
snapshot on an object store without the Hadoop S3 connector (pyspark ships none, and this machine cannot fetch it).

:func:`jobs.warehouse.read_spark` hands it the snapshot's file list (from the Delta log) and the table's schema;
each file is one input partition, read in a Python worker through pyarrow's file systems (S3 credentials and
endpoint from the usual ``AWS_*`` environment variables), its partition columns filled from the log's partition
values. On local disk Spark's own Parquet reader is used instead (faster); on a cluster with delta-spark,
``spark.read.format("delta")`` reads the same tables natively.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

#: The data source's name (``spark.read.format(NAME)``).
NAME = "tracelake_files"


class ParquetFiles(DataSource):
    """Options: ``files`` — JSON list of ``{"uri": …, "partition": {column: value}}``; the schema is given with
    ``.schema(…)`` (partition columns included, as strings)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def reader(self, schema) -> DataSourceReader:
        return _Reader(json.loads(self.options["files"]), schema.json())


class _Reader(DataSourceReader):
    def __init__(self, files: list[dict], schema_json: str):
        self.files, self.schema_json = files, schema_json

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(json.dumps(f)) for f in self.files]

    def read(self, partition: InputPartition):
        """One data file → Arrow record batches with every column of the schema (partition values filled, columns
        the file lacks — added to the table later — null)."""
        import pyarrow.parquet as pq  # heavy-ish: only in the Python workers
        from pyspark.sql.pandas.types import to_arrow_schema  # heavy: pyspark, only in the Python workers
        from pyspark.sql.types import StructType  # heavy: pyspark, only in the Python workers

        f = json.loads(partition.value)
        schema = to_arrow_schema(StructType.fromJson(json.loads(self.schema_json)))
        fs, path = pafs.FileSystem.from_uri(f["uri"]) if "://" in f["uri"] else (pafs.LocalFileSystem(), f["uri"])
        parts = f.get("partition") or {}
        with fs.open_input_file(path) as src:
            pf = pq.ParquetFile(src)
            have = set(pf.schema_arrow.names)
            for batch in pf.iter_batches(columns=[c for c in schema.names if c in have and c not in parts]):
                cols = []
                for field in schema:
                    if field.name in parts:
                        cols.append(pa.array([parts[field.name]] * batch.num_rows, field.type))
                    elif field.name in batch.schema.names:
                        cols.append(batch.column(field.name).cast(field.type))
                    else:
                        cols.append(pa.nulls(batch.num_rows, field.type))
                yield pa.RecordBatch.from_arrays(cols, schema=schema)
