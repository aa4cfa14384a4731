"""The oldest pyspark the connector works with, checked when ``chute.spark`` is imported.

The stream reader uses admission control (``latestOffset(start, limit)`` with read
limits, ``pyspark.sql.streaming.datasource``), which PySpark has since 4.2.
"""

from __future__ import annotations

import re
from typing import Final

MIN_PYSPARK: Final = (4, 2)
"""Keep equal to the lower bound of ``pyspark`` in pyproject.toml (a test checks)."""


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``4.3.0`` or ``4.2.0.dev1``."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not a version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def require_pyspark(version: str | None = None) -> None:
    """Raise ImportError, saying what to install, unless pyspark (or ``version``) is new
    enough for the connector."""
    wanted = ".".join(map(str, MIN_PYSPARK))
    if version is None:
        try:
            import pyspark  # noqa: PLC0415 (only here: the message says what to install)
        except ImportError:
            raise ImportError(
                f"chute.spark needs pyspark>={wanted} and pyarrow: pip install 'chute[spark]'"
            ) from None
        version = str(pyspark.__version__)
    if version_tuple(version) < MIN_PYSPARK:
        raise ImportError(
            f"chute.spark needs pyspark>={wanted} (its Python data source API with read "
            f"limits); pyspark {version} is installed: pip install --upgrade 'chute[spark]'"
        )
