"""The scheduler level: its driver, scenarios, traces, generator, and the runtime's L3 side."""
