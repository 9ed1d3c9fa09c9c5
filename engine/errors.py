"""The engine's error (its own module, so that the configuration modules share it); the runtime's are
``WorkerError`` and ``DataPlaneError`` (``runtime/``)."""


class ConfigError(ValueError):
    """Bad engine input; the message is one line that says what to change."""
