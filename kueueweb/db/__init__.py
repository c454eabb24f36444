"""Database backends of the embedded mode."""
