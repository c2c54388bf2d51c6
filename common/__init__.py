"""common: TODO."""
