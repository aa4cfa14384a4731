"""What a recovery found: what it replayed, cut, skipped and judged lost.

:mod:`chute.store.recovery` fills a :class:`RecoveryReport` as it reads a
journal; every problem is logged once as a warning when noted (the logger is
``chute.store.recovery``'s) and kept in ``problems``; ``str()`` is the summary
line the broker logs at the end.

Thread-safety: belongs to the recovering thread.
"""

from __future__ import annotations

import dataclasses
import logging

from chute.store.errors import CorruptRecord
from chute.store.gaps import Checkpoint, Tear

log = logging.getLogger("chute.store.recovery")


@dataclasses.dataclass(slots=True)
class RecoveryReport:
    """What a recovery found: replayed, cut and skipped."""

    directory: str
    segments: int = 0
    records: int = 0  # replayed
    bytes_read: int = 0
    bytes_cut: int = 0  # torn tails removed, up to their last non-zero byte
    records_skipped: int = 0  # corrupt regions and undecodable records
    bytes_skipped: int = 0
    seconds: float = 0.0
    segments_lost: int = 0  # missing, or blank among others (chute.store.gaps)
    segments_cut: int = 0  # cut short, or torn but not by a crash: records lost
    problems: list[str] = dataclasses.field(default_factory=list)
    blank: list[int] = dataclasses.field(default_factory=list)  # segments of zero bytes
    empty: list[int] = dataclasses.field(default_factory=list)  # a header and no record
    tears: list[Tear] = dataclasses.field(default_factory=list)  # in segment order
    lost_before: int = 0  # the location (segment, offset) the latest loss starts at
    redelivered: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """Per queue, the live messages recovery gave a delivery count (records were lost
    after them: their acks or marks may have been among them)."""
    checkpoint: Checkpoint | None = None  # the last one read: (segment, kept runs)

    @property
    def clean(self) -> bool:
        """Nothing was cut or skipped."""
        return not self.problems

    def __str__(self) -> str:
        text = (
            f"journal {self.directory}: replayed {self.records} records from "
            f"{self.segments} segments ({self.bytes_read / (1 << 20):.1f} MiB) "
            f"in {self.seconds:.2f} s"
        )
        if self.bytes_cut:
            text += f"; cut a torn tail of {self.bytes_cut} bytes"
        if self.records_skipped:
            text += f"; skipped {self.records_skipped} corrupt records ({self.bytes_skipped} bytes)"
        if self.segments_lost:
            text += f"; {self.segments_lost} segments lost (see the warnings above)"
        if self.segments_cut:
            text += (
                f"; records lost from {self.segments_cut} segments cut short "
                "(see the warnings above)"
            )
        return text

    def skipped(self, segment: int, offset: int, end: int, exc: CorruptRecord) -> None:
        """A record at ``offset`` (up to ``end``) passed its CRC but does not decode."""
        self.records_skipped += 1
        self.bytes_skipped += end - offset
        self.note(f"segment {segment} offset {offset}: {exc}; skipped")

    def note(self, text: str) -> None:
        """Log a problem and keep it in the report."""
        log.warning("journal %s: %s", self.directory, text)
        self.problems.append(text)
