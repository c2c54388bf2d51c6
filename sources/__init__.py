"""sources: TODO."""
