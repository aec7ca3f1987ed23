"""The scheduler-level mutants, under the name the self-tests have always used."""

from kvconf.conformance.mutants.scheduler import *  # noqa: F403
from kvconf.conformance.mutants.scheduler import (  # noqa: F401
    ADAPTER_PLANTED,
    L3_PLANTED,
    PLANTED_SCHED,
)
