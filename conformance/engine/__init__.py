"""What an engine is to the kit: its protocols, features, configuration."""
