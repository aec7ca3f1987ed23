"""The Mamba mutants, under the name the self-tests use."""

from kvconf.conformance.mutants.mamba import *  # noqa: F403
from kvconf.conformance.mutants.mamba import PLANTED_MAMBA  # noqa: F401
