"""Store implementations behind :class:`chute.core.model.store.Store`."""

from chute.store.journal import Journal, SyncMode
from chute.store.memory import MemoryStore
from chute.store.report import RecoveryReport

__all__ = ["Journal", "MemoryStore", "RecoveryReport", "SyncMode"]
