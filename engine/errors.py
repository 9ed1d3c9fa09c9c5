"""The engine's bad-input error, for the configuration modules (from ``common``, so that the runtime raises it)."""

from common import ConfigError

__all__ = ["ConfigError"]
