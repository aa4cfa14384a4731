"""chute as a PySpark data source: ``spark.read/readStream/write/writeStream.format("chute")``.

Needs the optional extra ``chute[spark]`` (pyspark 4.2 or later, and pyarrow); the
broker does not. Importing this package checks the pyspark version first.
Design, options and figures: docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from chute.spark.version import require_pyspark

require_pyspark()

from chute.spark.datasource import ChuteDataSource  # noqa: E402
from chute.spark.options import redact_passcode  # noqa: E402


def register(spark: Any) -> None:
    """Make ``format("chute")`` available in the SparkSession ``spark``, and have Spark
    redact the ``passcode`` option in plans as it does ``password``."""
    spark.dataSource.register(ChuteDataSource)
    redact_passcode(spark)


__all__ = ["ChuteDataSource", "register"]
