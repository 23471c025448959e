"""The sensor package's small exception hierarchy."""


class SensorError(Exception):
    """Base class for every error the sensor raises on purpose."""


class ConfigError(SensorError):
    """A configuration file or value is wrong; the message names the key and the reason."""


class WireError(SensorError):
    """A payload does not follow the wire format; the message says which field and why."""


class AudioInputError(SensorError):
    """An audio device or file cannot be used; the message names it and says why."""
