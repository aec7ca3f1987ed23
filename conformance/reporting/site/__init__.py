"""The parts of the documentation site (``kvconf docs build``), one concept per module: the
spec chapters in their reading order with a card per behaviour, what an engine author runs to
check a rule, how the known engines fare, the rule index, the catalog, the diagrams, the
formats, and the pass that links every behaviour and defect ID. ``docsite`` puts them together
and runs mkdocs."""
