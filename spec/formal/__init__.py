"""The formal model of the spec (z3): a bounded transition system of the prefix cache and the
request state machine, inductive invariants citing behaviour IDs, bounded model checking whose
counterexamples become kit traces, reachability (non-vacuity) and agreement with the reference.

See spec/chapters/formal.md for what is proved and at which scope.
"""

from kvconf.spec.formal.scope import DEFAULT_SCOPE, Scope

__all__ = ["DEFAULT_SCOPE", "Scope"]
