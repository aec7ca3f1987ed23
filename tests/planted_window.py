"""The window-config mutant, under the name the self-tests use."""

from conformance.mutants.window import *  # noqa: F403
from conformance.mutants.window import WindowFromTopLevelOnly  # noqa: F401
