"""The sensor package's small exception hierarchy."""

from enum import StrEnum


class SensorError(Exception):
    """Base class for every error the sensor raises on purpose."""


class ConfigError(SensorError):
    """A configuration file or value is wrong; the message names the key and the reason."""


class WireReason(StrEnum):
    """What kind of fault a refused payload has: a machine-readable code, so that rejections
    can be counted by reason (the analyzer's ``rejected_<reason>`` counters)."""

    UNSPECIFIED = "unspecified"  # a raise site that names none (a bug: every site should)
    TOO_LARGE = "too_large"  # more bytes than the limit
    NOT_MSGPACK = "not_msgpack"  # not one complete msgpack object
    NOT_A_MAP = "not_a_map"  # valid msgpack, but not a map
    VERSION = "version"  # schema version missing or not supported
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    WRONG_TYPE = "wrong_type"  # a field of the wrong msgpack type
    OUT_OF_RANGE = "out_of_range"  # a value outside its bounds (levels, rates, ids, sizes)
    NOT_FINITE = "not_finite"  # NaN or infinity in a level or an array
    BAD_ARRAY = "bad_array"  # array bytes not a whole number of items, or the wrong count
    BAD_TOPIC = "bad_topic"  # a topic not of the form barkwatch/v1/<kind>/<device>


class WireError(SensorError):
    """A payload does not follow the wire format; the message says which field and why, and
    ``reason`` what kind of fault it is."""

    def __init__(self, message: str, reason: WireReason = WireReason.UNSPECIFIED) -> None:
        super().__init__(message)
        self.reason = reason


class AudioInputError(SensorError):
    """An audio device or file cannot be used; the message names it and says why."""
