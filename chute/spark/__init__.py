"""chute as a PySpark data source: ``spark.read/readStream/write/writeStream.format("chute")``.

Needs the optional extra ``chute[spark]`` (pyspark and pyarrow); the broker does not.
Design, options and figures: docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from chute.spark.datasource import ChuteDataSource


def register(spark: Any) -> None:
    """Make ``format("chute")`` available in the SparkSession ``spark``."""
    spark.dataSource.register(ChuteDataSource)


__all__ = ["ChuteDataSource", "register"]
