"""The ``chute`` DataSource: Spark asks it for readers and writers (planning workers)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from chute.spark.options import ChuteOptions, OptionError, Side
from chute.spark.schema import READ_SCHEMA
from chute.spark.sink import ChuteBatchWriter, ChuteStreamWriter
from chute.spark.source import ChuteBatchReader, ChuteStreamReader


class ChuteDataSource(DataSource):
    """Options: docs/spark.md. Columns of a read: :data:`chute.spark.schema.READ_SCHEMA`."""

    @classmethod
    def name(cls) -> str:
        return "chute"

    def schema(self) -> str:
        # Spark asks for the schema of reads only, at load(): check their options there.
        ChuteOptions.parse(self.options, Side.READ)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ChuteOptions.parse(self.options, Side.READ)
        explicit = "cursor" in options.given
        return ChuteBatchReader(
            options, use_cursor=explicit or options.address.startswith("topic:")
        )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ChuteStreamReader(ChuteOptions.parse(self.options, Side.READ))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return ChuteBatchWriter(ChuteOptions.parse(self.options, Side.WRITE))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        return ChuteStreamWriter(ChuteOptions.parse(self.options, Side.WRITE))


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError("the chute sink only appends messages: use mode('append')")
