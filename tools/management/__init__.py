"""Management commands of the tools."""
