"""Hostile configuration files and installation records (issue 23 item 2): the sensor's and the
analyzer's TOML loaders and ``barkwatch site``'s validation path give a configuration or their
own ConfigError, and an error for a bad key names that key.

Files are built field by field from the loaders' own field tables (the settings dataclasses:
types, bounds, choices), written as TOML, then one key is corrupted (wrong type, NaN, infinity,
an integer too large for a float, a value past its bound, a deep array, a long or odd string,
a scalar where a table belongs, an unknown key) or the text itself is cut or bit-flipped.
Seeded (derandomize) so a failure reproduces.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import cli as analyzer_cli
from analyzer.acoustics.site import InstallationRecord, site_template
from analyzer.cli.site import load_site_record
from analyzer.config import AnalyzerConfig, load_analyzer_config
from analyzer.ordinance.rules import RuleSettings
from sensor.array import ArraySettings
from sensor.config import SensorConfig, load_sensor_config
from sensor.errors import ConfigError

# BARKWATCH_FUZZ_EXAMPLES raises the count for a longer run (benchmarks/README.md).
FUZZ = settings(max_examples=int(os.environ.get("BARKWATCH_FUZZ_EXAMPLES", "60")), deadline=None,
                derandomize=True, suppress_health_check=[HealthCheck.too_slow])
# Values every loader must take: without them a file is refused whatever else it holds.
REQUIRED = {
    SensorConfig: {"device_id": "dev-1"},
    # a preset constrains other keys (audio.channel one of its channels, custom's capsules):
    # the array's own tests cover them (tests/test_array.py, tests/test_bearing_capture.py)
    ArraySettings: {"preset": "none"},
    InstallationRecord: {"device_id": "dev-1", "source_to_sensor_m": 12.0,
                         "source_to_boundary_m": 6.0},
}
# Keys bounded by another key of the same table (smaller, larger): a drawn value over its
# bound is refused by name (tests/test_rules.py), so a valid table keeps it under.
WITHIN = {RuleSettings: (("intermittent_company_s", "intermittency_gap_s"),)}
LOADERS: dict[str, tuple[type, Callable[[str], object]]] = {
    "sensor": (SensorConfig, load_sensor_config),
    "analyzer": (AnalyzerConfig, load_analyzer_config),
    "site": (InstallationRecord, load_site_record),
}


# --- TOML out of a table ---------------------------------------------------------------------
def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes, and DEL escaped too (TOML refuses it raw)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, float):
        return repr(value)  # nan, inf, -inf and 1e+308 are TOML too
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_string(k)} = {_toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(type(value))


def to_toml(table: dict[str, Any], prefix: str = "") -> str:
    """TOML text of ``table``: scalars first, then each sub-table as its own [section]."""
    lines = [f"{_toml_string(k)} = {_toml_value(v)}" for k, v in table.items()
             if not isinstance(v, dict) or getattr(v, "inline", False)]
    for key, value in table.items():
        if isinstance(value, dict) and not getattr(value, "inline", False):
            path = f"{prefix}{_toml_string(key)}"
            lines.append(f"\n[{path}]\n" + to_toml(value, path + "."))
    return "\n".join(lines)


class Inline(dict[str, Any]):
    """A table written inline (``a = {b = 1}``): a hostile value, not a section."""

    inline = True


# --- valid tables, field by field --------------------------------------------------------------
@st.composite
def valid_tables(draw: st.DrawFn, cls: type) -> dict[str, Any]:
    """Every field of ``cls`` (recursively), each its default or a drawn value in its bounds."""
    hints = typing.get_type_hints(cls)
    table: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):
        kind = hints[spec.name]
        if dataclasses.is_dataclass(kind):
            table[spec.name] = draw(valid_tables(kind))  # type: ignore[arg-type]
            continue
        value = REQUIRED.get(cls, {}).get(spec.name, spec.default)
        meta = spec.metadata
        if spec.name in REQUIRED.get(cls, {}):
            pass
        elif meta.get("choices"):
            value = draw(st.sampled_from(meta["choices"]))
        elif kind in (int, float) and draw(st.booleans()) and meta.get("min") is not None \
                and meta.get("max") is not None:
            low, high = meta["min"], meta["max"]
            value = (draw(st.integers(int(math.ceil(low)), int(high))) if kind is int
                     else draw(st.floats(low, high)))
        table[spec.name] = value
    for smaller, larger in WITHIN.get(cls, ()):
        table[smaller] = min(table[smaller], table[larger])
    return table


def _paths(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of ``table``, sections and the keys inside them."""
    found: list[tuple[str, ...]] = []
    for key, value in table.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found.extend(_paths(value, (*prefix, key)))
    return found


def _table_at(table: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    for key in path[:-1]:
        table = table[key]
    return table


HOSTILE = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 10**400, -(10**400), 2**63,
                     -1, 0, 1e308, -1e308, True, "", "x" * 100_000, "\u0000\u001b\u007f",
                     "🐕\u202e", [], [1, "a"], Inline(a=1), Inline()]),
    st.integers(1, 600).map(lambda depth: json.loads("[" * depth + "]" * depth)),
    st.text(max_size=20), st.integers(), st.floats(),
)
HOSTILE_NAMED = "wrong type, NaN, infinity, huge integer, bounds, deep array or odd string"


@st.composite
def corrupted_files(draw: st.DrawFn, cls: type) -> tuple[str, str, bool]:
    """(TOML text, corrupted key path, whether the corruption is surely invalid)."""
    table = draw(valid_tables(cls))
    path = draw(st.sampled_from(_paths(table)))
    parent = _table_at(table, path)
    name = ".".join(path)
    kind = draw(st.sampled_from(["value", "unknown_key", "past_bound", "not_a_table",
                                 "text"]))
    if kind == "value":
        value = parent[path[-1]] = draw(HOSTILE)
        return to_toml(table), name, _surely_invalid(cls, path, value)
    if kind == "unknown_key":
        key = draw(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12))
        if key in parent:
            return to_toml(table), name, False
        parent[key] = draw(HOSTILE)
        return to_toml(table), ".".join((*path[:-1], key)), True
    if kind == "past_bound":
        spec = _field_at(cls, path)
        if spec is not None and spec.metadata.get("max") is not None:
            parent[path[-1]] = spec.metadata["max"] * 2 + 1
            return to_toml(table), name, True
        return to_toml(table), name, False
    if kind == "not_a_table":
        sections = [p for p in _paths(table) if isinstance(_table_at(table, p)[p[-1]], dict)]
        if sections:
            section = draw(st.sampled_from(sections))
            _table_at(table, section)[section[-1]] = draw(st.integers() | st.text(max_size=5))
            return to_toml(table), ".".join(section), True
        return to_toml(table), name, False
    text = to_toml(table).encode()
    data = bytearray(text)
    for _ in range(draw(st.integers(1, 8))):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]).decode("utf-8", "surrogateescape"), "", False


def _field_at(cls: type, path: tuple[str, ...]) -> dataclasses.Field[Any] | None:
    for key in path:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if key not in fields:
            return None
        spec = fields[key]
        kind = typing.get_type_hints(cls)[key]
        if dataclasses.is_dataclass(kind):
            cls = kind  # type: ignore[assignment]
        else:
            return spec
    return None


def _surely_invalid(cls: type, path: tuple[str, ...], value: Any) -> bool:
    """Whether ``value`` at ``path`` breaks the field's declared type, finiteness, bounds or
    choices (what the loader must refuse by that key's name)."""
    for key in path[:-1]:
        cls = typing.get_type_hints(cls)[key]
    kind = typing.get_type_hints(cls)[path[-1]]
    meta = {f.name: f for f in dataclasses.fields(cls)}[path[-1]].metadata
    if dataclasses.is_dataclass(kind):
        return not isinstance(value, dict)
    if kind not in (str, int, float, bool):
        return False  # unions and the like: not judged here
    if isinstance(value, bool) != (kind is bool):
        return True
    if kind is float and isinstance(value, int):
        if abs(value) > 1e308:
            return True
        value = float(value)
    if not isinstance(value, kind):
        return True
    if isinstance(value, float) and not math.isfinite(value):
        return True
    if meta.get("choices") is not None and value not in meta["choices"]:
        return True
    if isinstance(value, int | float) and not isinstance(value, bool):
        low, high = meta.get("min"), meta.get("max")
        return (low is not None and value < low) or (high is not None and value > high)
    return False


def _load(loader: Callable[[str], object], text: str) -> tuple[object | None, str]:
    """The configuration, or the ConfigError's message; any other exception fails the test."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.toml"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        try:
            return loader(str(path)), ""
        except ConfigError as exc:
            assert str(exc), "a ConfigError without a message"
            return None, str(exc)


def _check(which: str, case: tuple[str, str, bool]) -> None:
    cls, loader = LOADERS[which]
    text, key, surely_invalid = case
    config, message = _load(loader, text)
    if surely_invalid:
        assert config is None, f"{which}: {key} accepted"
    if config is None and key and surely_invalid:
        # The path as the loaders quote it; an unknown key may be shown with its parent's
        # known keys, and the unknown key itself in repr form.
        assert key in message or repr(key)[1:-1] in message, (key, message[:300])


# --- the tests -------------------------------------------------------------------------------
@FUZZ
@given(table=valid_tables(SensorConfig))
def test_a_sensor_config_built_from_its_field_table_within_bounds_loads(
        table: dict[str, Any]) -> None:
    config, message = _load(load_sensor_config, to_toml(table))
    assert config is not None, message


@FUZZ
@given(table=valid_tables(AnalyzerConfig))
def test_an_analyzer_config_built_from_its_field_table_within_bounds_loads(
        table: dict[str, Any]) -> None:
    config, message = _load(load_analyzer_config, to_toml(table))
    assert config is not None, message


@FUZZ
@given(case=corrupted_files(SensorConfig))
def test_a_corrupted_sensor_config_is_loaded_or_refused_by_a_config_error_naming_the_key(
        case: tuple[str, str, bool]) -> None:
    _check("sensor", case)


@FUZZ
@given(case=corrupted_files(AnalyzerConfig))
def test_a_corrupted_analyzer_config_is_loaded_or_refused_by_a_config_error_naming_the_key(
        case: tuple[str, str, bool]) -> None:
    _check("analyzer", case)


@FUZZ
@given(case=corrupted_files(InstallationRecord))
def test_a_corrupted_installation_record_is_loaded_or_refused_by_a_config_error_naming_the_key(
        case: tuple[str, str, bool]) -> None:
    _check("site", case)


@FUZZ
@given(address=st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
       installed_by=st.text(st.characters(exclude_categories=["Cs"]), max_size=20),
       sensor_m=st.floats(allow_nan=False, allow_infinity=False),
       boundary_m=st.floats(allow_nan=False, allow_infinity=False))
def test_any_record_site_create_writes_is_read_back_or_refused_naming_the_key(
        address: str, installed_by: str, sensor_m: float, boundary_m: float) -> None:
    text = site_template("dev-1", address=address, installed_by=installed_by,
                         source_to_sensor_m=sensor_m, source_to_boundary_m=boundary_m)
    record, message = _load(load_site_record, text)
    if record is None:  # only the distances can be wrong: the text is the template's own
        assert "source_to_sensor_m" in message or "source_to_boundary_m" in message, message
    else:
        assert isinstance(record, InstallationRecord)
        assert (record.address, record.installed_by) == (address, installed_by)


def test_site_create_with_an_emoji_and_a_del_in_the_address_writes_a_record_it_reads_back(
        tmp_path: Path) -> None:
    record = tmp_path / "site.toml"
    assert analyzer_cli.main(["site", "create", str(record), "--device", "yard-7",
                              "--sensor-m", "8", "--boundary-m", "4",
                              "--address", "1 Elm St \U0001f415\x7f"]) == 0
    assert load_site_record(str(record)).address == "1 Elm St \U0001f415\x7f"


def test_site_create_refuses_an_address_whose_argv_bytes_are_not_utf8_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "site.toml"
    address = b"Elm \xff".decode("utf-8", "surrogateescape")  # as Python decodes argv
    assert analyzer_cli.main(["site", "create", str(record), "--device", "yard-7",
                              "--address", address]) == 1
    assert "--address 'Elm \\udcff' is not UTF-8 text" in capsys.readouterr().err
    assert not record.exists()
