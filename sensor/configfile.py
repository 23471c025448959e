"""Typed TOML configuration: frozen dataclasses that reject unknown keys and out-of-range values.

Each field declares its bounds and a one-line description with :func:`setting`; errors name
the key path (``mqtt.port``) and the reason. TOML allows ``nan`` and ``inf``: every float is
refused unless finite, because ``nan`` compares false with any bound and would pass them all.
Secrets are never stored in the file: a field named ``*_env`` names an environment variable,
read when the configuration is loaded.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from sensor.errors import ConfigError

T = TypeVar("T")


def setting(
    default: Any,
    description: str,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[Any, ...] | None = None,
) -> Any:
    """A configuration field with a default, bounds and a description."""
    metadata = {"description": description, "min": minimum, "max": maximum, "choices": choices}
    if dataclasses.is_dataclass(default):
        factory = type(default)
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _check_value(value: Any, expected: Any, key: str, meta: typing.Mapping[str, Any]) -> Any:
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError as exc:
            raise ConfigError(
                f"config key {key!r}: an integer of {len(str(abs(value)))} digits is too "
                "large for a number"
            ) from exc
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        allowed = tuple(a for a in typing.get_args(expected) if a is not type(None))
        if not isinstance(value, allowed) or isinstance(value, bool):
            names = " or ".join(a.__name__ for a in allowed)
            raise ConfigError(f"config key {key!r}: expected {names}, got {value!r}")
    elif isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
        raise ConfigError(
            f"config key {key!r}: expected {expected.__name__}, "
            f"got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key {key!r}: {value} is not a finite number")
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ConfigError(f"config key {key!r}: {value!r} is not one of {list(meta['choices'])}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if meta.get("min") is not None and value < meta["min"]:
            raise ConfigError(f"config key {key!r}: {value} is below the minimum {meta['min']}")
        if meta.get("max") is not None and value > meta["max"]:
            raise ConfigError(f"config key {key!r}: {value} is above the maximum {meta['max']}")
    return value


def build(cls: type[T], data: Any, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a parsed TOML table, validating every key."""
    if not isinstance(data, dict):
        raise ConfigError(f"config key {prefix.rstrip('.') or '<root>'!r}: expected a table")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"config key {prefix + unknown[0]!r} is unknown (known keys here: "
            f"{', '.join(sorted(fields))})"
        )
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            continue
        key = prefix + name
        expected = hints[name]
        if dataclasses.is_dataclass(expected):
            values[name] = build(expected, data[name], key + ".")  # type: ignore[arg-type]
        else:
            values[name] = _check_value(data[name], expected, key, f.metadata)
    return cls(**values)


def load(cls: type[T], path: str | Path) -> T:
    """Read and validate a TOML configuration file (UTF-8, as TOML requires)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"config file {path} is not UTF-8 text (TOML must be): byte 0x{raw[exc.start]:02x} "
            f"at offset {exc.start} (line {line}): {exc.reason}"
        ) from exc
    if text.startswith("\ufeff"):
        raise ConfigError(
            f"config file {path} starts with a byte order mark: save it as UTF-8 without one"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(
            f"config file {path} is not usable TOML: arrays or tables nested too deeply"
        ) from exc
    except ValueError as exc:  # int() refuses integers longer than the interpreter's limit
        reason = (
            f"it holds an integer of more than {sys.get_int_max_str_digits()} digits"
            if "digits" in str(exc) else str(exc)
        )
        raise ConfigError(f"config file {path} is not usable TOML: {reason}") from exc
    return build(cls, data)


def finite_float(text: str) -> float:
    """An ``argparse`` type: a finite number (``float()`` also reads "nan" and "inf", which
    would pass every later bound as configuration values would)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from exc
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def describe(cls: type, prefix: str = "") -> list[str]:
    """One line per key: path, default, description (``--help``, docs/CONFIGURATION.md)."""
    lines: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            lines.extend(describe(hints[f.name], prefix + f.name + "."))
            continue
        default = f.default
        lines.append(f"{prefix}{f.name} = {default!r}  # {f.metadata.get('description', '')}")
    return lines
