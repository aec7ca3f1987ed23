"""``python -m kvconf``: the ``kvconf`` command."""

from kvconf.conformance.cli import main

main()
