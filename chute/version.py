"""The version of chute, in one place (the package, the CLI and the servers show it)."""

__version__ = "0.1.0"
