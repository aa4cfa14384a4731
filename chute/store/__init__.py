"""Store implementations behind :class:`chute.core.store.Store`."""

from chute.store.memory import MemoryStore

__all__ = ["MemoryStore"]
