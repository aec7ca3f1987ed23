"""Trace generators: Hypothesis stateful machines that write traces while they drive an engine."""
