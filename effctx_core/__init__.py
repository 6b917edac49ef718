"""effctx core: the session engine, backends and everything that is not UI."""

__version__ = "0.1.0"
