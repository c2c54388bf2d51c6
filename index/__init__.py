"""index: TODO."""
