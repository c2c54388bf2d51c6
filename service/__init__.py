"""service: TODO."""
