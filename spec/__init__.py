"""The normative spec of kvconf: chapters, the behaviour registry and the defect catalog.

Every normative rule is a behaviour with a stable ID in ``spec/registry/*.toml``; the chapters in
``spec/chapters/`` explain them and place them with ``{{ behaviour("ID") }}`` markers.
"""

from kvconf.spec.registry import Behaviour, Defect, Level, Registry, load_registry

__all__ = ["Behaviour", "Defect", "Level", "Registry", "load_registry"]
