"""contextkeep."""
