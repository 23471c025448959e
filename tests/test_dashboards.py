"""The Grafana dashboards: well-formed, provisioned, and every query proven against real data.

No Grafana server can run here (docs: shared PLATFORM.md), so the tests do what Grafana does
with a query: expand its macros and template variables the way Grafana's InfluxQL data source
does, send it to a real InfluxDB that the live analyzer filled from a replay, and check that
the rows carry the columns the panel reads, each with data.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from analyzer.acoustics.site import site_template
from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings
from dashboards import generate
from sensor.config import MqttSettings
from sensor.wire import encode_frame, frame_topic
from tests.conftest import wait_until
from tests.test_rules_end_to_end import DEVICE, NS, _bark_and_quiet_frames, _publish

ROOT = Path(__file__).resolve().parent.parent
PROVISIONING = ROOT / "dashboards" / "provisioning"
DATASOURCE_UID = "barkwatch-influxdb"
GRAFANA_SCHEMA_VERSIONS = range(36, 40)  # what Grafana 10 and 11 load without migrating back

EPISODE_BARKS_S = range(0, 481, 20)  # a bark every 20 s for 8 minutes: one continuous finding
TOTAL_S = 720  # then quiet long enough for the gap and the reorder window to close it
INTERVAL_S = 10  # $__interval Grafana would pick for the test range at ~200 data points

BUILTINS = {"timeFilter", "__interval", "__interval_ms", "interval"}
ALIAS_PATTERNS = (re.compile(r"^tag_\w+$"), re.compile(r"^col$"))
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
DASHBOARDS = generate.build()


@dataclass(frozen=True)
class Query:
    """The queries behind one panel, variable or annotation, and the columns Grafana reads
    from their results (``alias_tags``: per query, the tags its alias names).
    """

    where: str
    texts: tuple[str, ...]
    columns: frozenset[str]
    alias_tags: tuple[frozenset[str], ...]


@dataclass(frozen=True)
class Filled:
    """The replayed database and the dashboard time range around it (ms since the epoch)."""

    influx: InfluxClient
    from_ms: int
    to_ms: int


def _heartbeat(time_ns: int) -> dict[str, Any]:
    return {"device_id": DEVICE, "time_ns": time_ns, "uptime_s": 720.0,
            "software_version": "0.1.0", "frames": TOTAL_S, "lost_samples": 0,
            "dropped_blocks": 0, "overflows": 0, "queue_depth": 0, "outbox_backlog": 3,
            "outbox_evicted": 0, "published": TOTAL_S, "acknowledged": TOTAL_S, "denied": 0,
            "inflight": 0, "connects": 1, "clock_synchronised": True,
            "clock_max_error_us": 12000, "calibration_date": "2026-05-30",
            "full_scale_db": 100.0}


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    """An 8-minute barking episode, then quiet, through the live analyzer; a heartbeat and an
    'online' status: level, dog_event, background, rule_progress, one evidence_window,
    sensor_health and sensor_status points for ``DEVICE``."""
    root = tmp_path_factory.mktemp("dashboards")
    sites = root / "sites"
    sites.mkdir()
    (sites / f"{DEVICE}.toml").write_text(site_template(
        DEVICE, source_to_sensor_m=5.0, source_to_boundary_m=5.0, ground="hard"))
    bark, quiet = _bark_and_quiet_frames()
    start_ns = time.time_ns() - (TOTAL_S + 600) * NS
    frames = [(frame_topic(DEVICE), encode_frame(dataclasses.replace(
        (bark if t in EPISODE_BARKS_S else quiet).retimed(start_ns + t * NS), device_id=DEVICE,
        seq=t))) for t in range(TOTAL_S)]
    with Services(root / "services") as services:
        config = AnalyzerConfig(
            stats_interval_s=1.0, sites_dir=str(sites),
            drop_flood=False,  # a burst from a plain client, which sends nothing again
            mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
            influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5))
        analyzer = Analyzer(config)
        analyzer.start()
        try:
            wait_until(analyzer.connected.is_set, what="the analyzer to connect")
            _publish(services.broker.port, [
                *frames,
                (f"barkwatch/v1/heartbeat/{DEVICE}",
                 json.dumps(_heartbeat(time.time_ns())).encode()),
                (f"barkwatch/v1/status/{DEVICE}", b"online"),
            ])
            counters = analyzer.counters
            wait_until(lambda: counters.frames_stored >= TOTAL_S, what="every frame")
            wait_until(lambda: counters.findings_stored >= 1, what="the episode's finding")
            wait_until(lambda: counters.heartbeats >= 1 and counters.status_changes >= 1,
                       what="the heartbeat and status")
        finally:
            analyzer.stop()
        yield Filled(InfluxClient(config.influx), start_ns // 1_000_000 - 600_000,
                     time.time_ns() // 1_000_000 + 600_000)


def _escape_regex(value: str) -> str:
    """Grafana's escapeRegex (public/app/core/utils/kbn / @grafana/data)."""
    return re.sub(r"[\\^$*+?.()|\[\]{}/]", lambda m: "\\" + m.group(0), value)


def expand(query: str, variables: dict[str, Any], filled: Filled,
           values: dict[str, list[str]]) -> str:
    """Expand ``query`` as Grafana's InfluxQL data source does for the test range.

    ``values``: the selected values per variable. A multi-value or include-All variable is
    regex-escaped and, with several values, written ``(a|b)``; a single-value one is
    inserted as it is (Grafana's ``interpolateQueryExpr``).
    """
    text = query.replace("$timeFilter",
                         f"time >= {filled.from_ms}ms and time <= {filled.to_ms}ms")
    text = text.replace("$__interval_ms", str(INTERVAL_S * 1000))
    text = text.replace("$__interval", f"{INTERVAL_S}s").replace("$interval", f"{INTERVAL_S}s")

    def value_of(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        variable = variables[name]
        chosen = values[name]
        if not (variable["multi"] or variable["includeAll"]):
            return chosen[0]
        escaped = [_escape_regex(v) for v in chosen]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return VARIABLE.sub(value_of, text)


def _read_columns(panel: dict[str, Any]) -> set[str]:
    """Field names a panel refers to: override matchers and organize options."""
    names = {o["matcher"]["options"] for o in panel["fieldConfig"]["overrides"]
             if o["matcher"]["id"] == "byName"}
    for step in panel.get("transformations", []):
        for key in ("excludeByName", "indexByName", "renameByName"):
            names |= set(step["options"].get(key, {}))
    return names


def _alias_tags(alias: str) -> frozenset[str]:
    """Tags an alias names (``$tag_rule``): the query must GROUP BY them."""
    return frozenset(m.group(1) for m in re.finditer(r"\$tag_(\w+)", alias))


def queries(model: dict[str, Any]) -> list[Query]:
    """Every query of a dashboard: template variables, panels' targets, annotations."""
    found = [Query(f"variable {v['name']}", (v["query"],), frozenset(), (frozenset(),))
             for v in model["templating"]["list"] if v["type"] == "query"]
    found += [Query(f"panel {p['id']} {p['title']!r}", tuple(t["query"] for t in p["targets"]),
                    frozenset(_read_columns(p)),
                    tuple(_alias_tags(t.get("alias", "")) for t in p["targets"]))
              for p in model["panels"]]
    for item in model["annotations"]["list"]:
        read = frozenset(item[key] for key in ("titleColumn", "textColumn", "tagsColumn",
                                               "timeEndColumn") if item.get(key))
        found.append(Query(f"annotation {item['name']!r}", (item["query"],), read,
                           (frozenset(),)))
    return found


ALL_QUERIES = [(name, q) for name, model in DASHBOARDS.items() for q in queries(model)]


def _selected(model: dict[str, Any], filled: Filled) -> dict[str, list[str]]:
    """Each variable's selection: 'All' of what its own query finds, or the test device."""
    chosen: dict[str, list[str]] = {}
    for variable in model["templating"]["list"]:
        series = filled.influx.query(variable["query"])
        found = [row[1] for s in series for row in s["values"]]
        assert DEVICE in found, f"variable {variable['name']}: {found}"
        chosen[variable["name"]] = found if variable["includeAll"] else [DEVICE]
    return chosen


@pytest.mark.parametrize(("name", "query"), ALL_QUERIES,
                         ids=[f"{name}:{q.where}" for name, q in ALL_QUERIES])
def test_query_returns_the_columns_its_panel_reads(name: str, query: Query,
                                                   filled: Filled) -> None:
    model = DASHBOARDS[name]
    variables = {v["name"]: v for v in model["templating"]["list"]}
    selected = _selected(model, filled)
    columns: set[str] = {"Time"}
    for text, alias_tags in zip(query.texts, query.alias_tags, strict=True):
        influxql = expand(text, variables, filled, selected)
        assert not re.search(r"\$\w|\$\{|\[\[", influxql), f"left unexpanded: {influxql}"
        series = filled.influx.query(influxql)
        assert series, f"{query.where} returned nothing: {influxql}"
        for item in series:
            tags = item.get("tags") or {}
            assert alias_tags <= set(tags), f"{query.where}: alias names {alias_tags}: {tags}"
            columns |= set(tags)  # Grafana's table format turns GROUP BY tags into columns
            for index, column in enumerate(item["columns"]):
                columns.add(column)
                assert column == "time" or any(row[index] is not None for row in item["values"]), (
                    f"{query.where}: column {column!r} has no data: {influxql}")
    missing = query.columns - columns
    assert not missing, f"{query.where} reads {sorted(missing)}, not in {sorted(columns)}"


def test_expansion_follows_grafanas_influxql_interpolation() -> None:
    single = {"device": {"multi": False, "includeAll": False}}
    every = {"device": {"multi": True, "includeAll": True}}
    span = Filled(InfluxClient(InfluxSettings()), 1000, 2000)
    query = ('SELECT x FROM m WHERE "device" =~ /^$device$/ AND $timeFilter '
             "GROUP BY time($__interval)")
    assert expand(query, single, span, {"device": ["a.b"]}) == (
        'SELECT x FROM m WHERE "device" =~ /^a.b$/ AND time >= 1000ms and time <= 2000ms '
        "GROUP BY time(10s)")
    assert "/^(a\\.b|c-1)$/" in expand(query, every, span, {"device": ["a.b", "c-1"]})
    assert expand("[[device]] ${device} $__interval_ms", single, span,
                  {"device": ["d"]}) == "d d 10000"


def _datasource_refs(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_refs(value)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_committed_json_is_what_the_generator_makes(name: str) -> None:
    committed = (generate.JSON_DIR / name).read_text(encoding="utf-8")
    assert json.loads(committed) == DASHBOARDS[name]
    assert committed == generate.render(DASHBOARDS[name])


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_is_well_formed(name: str) -> None:
    model = json.loads((generate.JSON_DIR / name).read_text(encoding="utf-8"))
    assert model["schemaVersion"] in GRAFANA_SCHEMA_VERSIONS
    assert model["uid"] and len(model["uid"]) <= 40
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids)), ids
    refs = list(_datasource_refs(model))
    assert refs and all(ref == {"type": "influxdb", "uid": DATASOURCE_UID} for ref in refs)
    for item in model["annotations"]["list"]:
        assert item["target"]["query"] == item["query"], item["name"]
        assert item["target"]["timeEndColumn"] == item["timeEndColumn"], item["name"]
    for panel in model["panels"]:
        assert panel["targets"] and panel["description"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def _variable_names(text: str) -> set[str]:
    """Names of the variables ``text`` refers to (``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``)."""
    return {next(group for group in m.groups() if group) for m in VARIABLE.finditer(text)}


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_variable_used_is_defined(name: str) -> None:
    model = DASHBOARDS[name]
    defined = {v["name"] for v in model["templating"]["list"]} | BUILTINS
    for query in queries(model):
        used = set().union(*(_variable_names(text) for text in query.texts))
        assert used <= defined, f"{query.where} uses undefined {sorted(used - defined)}"
    for panel in model["panels"]:
        for item in panel["targets"]:
            for name in _variable_names(item.get("alias", "")):
                assert name in defined or any(p.match(name) for p in ALIAS_PATTERNS), name


def test_panels_have_units_and_the_rule_limits_are_drawn() -> None:
    address = {p["title"]: p for p in DASHBOARDS["address.json"]["panels"]}
    for title, limit in (("Continuous rule: episode length", 7),
                         ("Intermittent rule: stretch length", 60)):
        defaults = address[title]["fieldConfig"]["defaults"]
        assert defaults["unit"] == "m"
        assert defaults["custom"]["thresholdsStyle"]["mode"] == "dashed"
        assert limit in [step["value"] for step in defaults["thresholds"]["steps"]]
    assert address["Sound level at the sensor"]["fieldConfig"]["defaults"]["unit"] == "dB"


def test_provisioning_points_grafana_at_the_data_source_and_the_dashboards() -> None:
    datasource = (PROVISIONING / "datasources" / "barkwatch.yaml").read_text()
    assert f"uid: {DATASOURCE_UID}" in datasource
    assert "type: influxdb" in datasource
    for variable in ("BARKWATCH_INFLUX_URL", "BARKWATCH_INFLUX_DATABASE",
                     "BARKWATCH_INFLUX_USER", "BARKWATCH_INFLUX_PASSWORD"):
        assert f"${{{variable}}}" in datasource
    provider = (PROVISIONING / "dashboards" / "barkwatch.yaml").read_text()
    assert "type: file" in provider
    assert "path: ${BARKWATCH_DASHBOARDS_DIR}" in provider
