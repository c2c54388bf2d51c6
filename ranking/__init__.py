"""ranking: TODO."""
