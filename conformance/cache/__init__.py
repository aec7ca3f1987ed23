"""The cache level: its driver, scenarios, trace generator and ledger."""
