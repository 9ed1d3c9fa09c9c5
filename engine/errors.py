"""The engine's error for bad input (its own module, so that the configuration modules share it)."""


class ConfigError(ValueError):
    """Bad engine input; the message is one line that says what to change."""
