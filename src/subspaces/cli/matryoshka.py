"""Commands for this capability (being written)."""
