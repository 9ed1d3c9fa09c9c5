"""The engine's errors (their own module, so that the configuration modules share them)."""


class ConfigError(ValueError):
    """Bad engine input; the message is one line that says what to change."""


class DataPlaneError(RuntimeError):
    """A data-plane collective failed or timed out on rank 0 while every worker was still alive."""
