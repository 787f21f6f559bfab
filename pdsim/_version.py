"""pdsim's version, in a module of its own so writers can read it without importing the
whole package."""

__version__ = "0.1.0"
