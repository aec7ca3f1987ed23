"""The cache-level mutants, under the name the self-tests have always used."""

from conformance.mutants.cache import *  # noqa: F403
from conformance.mutants.cache import PLANTED  # noqa: F401
