"""setup: TODO."""
