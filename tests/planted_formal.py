"""Catalog defects planted in the formal model, each paired with the mutant of ``planted.py``
that carries the same defect in an engine; a hook of ``kvconf.spec.formal.actions.Model`` is
overridden, never the model itself edited."""

from __future__ import annotations

from kvconf.spec.formal.actions import Model
from kvconf.spec.formal.state import caller


class ModelEvictsPinned(Model):
    """PIN-2: eviction takes pinned leaves too (engine mutant EvictsPinned)."""

    def evict_respects_pins(self) -> bool:
        return False


class ModelLeaksDuplicates(Model):
    """POOL-4 / TREE-5: duplicate caller pages stay with the caller (LeaksDuplicates)."""

    def duplicate_owner(self) -> int:
        return caller(self.scope)


class ModelSharedNamespaces(Model):
    """NS-1 / D268-1: every insert lands in the base model's tree (SharedNamespaces)."""

    def insert_target(self, ns: int, tokens: tuple[int, ...]) -> int:
        return self.scope.index(0, tokens)


class ModelMambaAnyDepth(Model):
    """D162-4: prefix reuse takes a Mamba state of any depth (no engine mutant yet)."""

    def mamba_exact(self) -> bool:
        return False
