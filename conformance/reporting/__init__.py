"""What a run leaves: reports, JUnit, diffs, merges, expectations, compliance pages and the documentation site."""
