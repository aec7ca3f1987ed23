"""The hybrid cache level's part of the kit: trace format, driver, scenarios and fuzz walk."""
