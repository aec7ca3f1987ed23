"""The cache-level mutants, under the name the self-tests have always used."""

from kvconf.conformance.mutants.cache import *  # noqa: F403
from kvconf.conformance.mutants.cache import PLANTED  # noqa: F401
