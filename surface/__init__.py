"""surface: TODO."""
