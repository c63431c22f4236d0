"""``e31``: the E31 Network command line (no Django; talks to the REST API only)."""

__version__ = "0.1.0"
