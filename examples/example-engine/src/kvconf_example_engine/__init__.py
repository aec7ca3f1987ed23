"""An example engine package for kvconf: a prefix cache and its conformance adapter."""

__version__ = "0.1.0"
