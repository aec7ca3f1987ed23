"""Running cases: the runner, workers, units of work, shrinking, profiles."""
