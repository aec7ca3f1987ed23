"""The conformance kit: protocols, adapters, driver, oracles, generators, runner, reports, CLI."""

__version__ = "0.1.0"
