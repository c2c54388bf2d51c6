"""providers: TODO."""
