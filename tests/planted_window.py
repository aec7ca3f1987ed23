"""The window-config mutant, under the name the self-tests use."""

from kvconf.conformance.mutants.window import *  # noqa: F403
from kvconf.conformance.mutants.window import WindowFromTopLevelOnly  # noqa: F401
