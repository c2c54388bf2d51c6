"""pipeline: TODO."""
