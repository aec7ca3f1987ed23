"""The Mamba mutants, under the name the self-tests use."""

from conformance.mutants.mamba import *  # noqa: F403
from conformance.mutants.mamba import PLANTED_MAMBA  # noqa: F401
