"""Generate Barkwatch's Grafana dashboards (JSON under ``dashboards/json/``).

Plain Python building the dashboard model Grafana 10/11 reads (``schemaVersion`` 39). Every
query is raw InfluxQL against the provisioned data source ``barkwatch-influxdb``; field and tag
names are those of docs/INFLUXDB.md. The tests regenerate the dashboards, compare
them with the committed JSON and run every query against a real InfluxDB that the analyzer
filled, so edit this file, not the JSON, then run::

    python dashboards/generate.py          # rewrite dashboards/json/*.json
    python dashboards/generate.py --check  # exit 1 when the committed JSON is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

JSON_DIR = Path(__file__).resolve().parent / "json"
SCHEMA_VERSION = 39
DATASOURCE: dict[str, str] = {"type": "influxdb", "uid": "barkwatch-influxdb"}

# The ordinance's limits (Subd. 5; analyzer.ordinance.rules.RuleSettings defaults), in minutes.
CONTINUOUS_LIMIT_MIN = 7
INTERMITTENT_LIMIT_MIN = 60
# An event is plainly audible 100 ft beyond the boundary when its margin reaches this
# (analyzer.acoustics.audibility.AudibilitySettings.margin_db default), dB.
AUDIBLE_MARGIN_DB = 10

DEVICE_FILTER = '"device" =~ /^$device$/'
HEALTH_WINDOW = "time > now() - 30d"  # fleet "current state": the latest value of 30 days

Json = dict[str, Any]


def target(query: str, ref: str = "A", alias: str = "", table: bool = False) -> Json:
    """A raw InfluxQL target (Grafana's InfluxQL editor in raw mode)."""
    item: Json = {
        "datasource": DATASOURCE,
        "refId": ref,
        "query": query,
        "rawQuery": True,
        "resultFormat": "table" if table else "time_series",
    }
    if alias:
        item["alias"] = alias
    return item


def thresholds(*steps: tuple[float | None, str]) -> Json:
    """Absolute thresholds: ``(None, base colour)`` first, then ``(value, colour)``."""
    return {"mode": "absolute",
            "steps": [{"color": colour, "value": value} for value, colour in steps]}


def panel(kind: str, title: str, description: str, grid: tuple[int, int, int, int],
          targets: Sequence[Json], unit: str = "", **extra: Any) -> Json:
    """A panel of ``kind`` at ``grid`` = (x, y, width, height); ids are assigned later."""
    defaults: Json = {"unit": unit} if unit else {}
    defaults.update(extra.pop("defaults", {}))
    x, y, w, h = grid
    item: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": list(targets),
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
    }
    item.update(extra)
    return item


def series_panel(title: str, description: str, grid: tuple[int, int, int, int],
                 targets: Sequence[Json], unit: str, style: str = "line",
                 limit: Json | None = None, overrides: Sequence[Json] = ()) -> Json:
    """A time series panel; ``limit`` thresholds are drawn as dashed lines."""
    custom: Json = {"drawStyle": style, "lineWidth": 1, "fillOpacity": 0,
                    "showPoints": "always" if style == "points" else "never", "pointSize": 5,
                    "spanNulls": False,
                    "thresholdsStyle": {"mode": "dashed" if limit else "off"}}
    if style == "bars":
        custom["fillOpacity"] = 80
    defaults: Json = {"custom": custom, "color": {"mode": "palette-classic"}}
    if limit is not None:
        defaults["thresholds"] = limit
    return panel("timeseries", title, description, grid, targets, unit, defaults=defaults,
                 overrides=list(overrides),
                 options={"legend": {"displayMode": "list", "placement": "bottom",
                                     "showLegend": True},
                          "tooltip": {"mode": "multi", "sort": "none"}})


def stat_panel(title: str, description: str, grid: tuple[int, int, int, int],
               targets: Sequence[Json], unit: str = "", steps: Json | None = None,
               mappings: Sequence[Json] = (), fields: str = "", decimals: int | None = None
               ) -> Json:
    """A stat panel showing the last value, coloured by ``steps``."""
    defaults: Json = {"thresholds": steps or thresholds((None, "blue")),
                      "color": {"mode": "thresholds"}, "mappings": list(mappings)}
    if decimals is not None:
        defaults["decimals"] = decimals
    return panel("stat", title, description, grid, targets, unit, defaults=defaults,
                 options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": fields,
                                            "values": False},
                          "colorMode": "background", "graphMode": "none",
                          "justifyMode": "auto", "orientation": "auto",
                          "textMode": "value_and_name"})


def unit_override(column: str, unit: str, **props: Any) -> Json:
    """Give a table column a unit (and further field config properties)."""
    properties = [{"id": "unit", "value": unit}]
    properties += [{"id": key.replace("_", "."), "value": value} for key, value in props.items()]
    return {"matcher": {"id": "byName", "options": column}, "properties": properties}


def bool_mapping(true_text: str, true_colour: str, false_text: str, false_colour: str) -> Json:
    """A value mapping for an InfluxDB boolean field."""
    return {"type": "value", "options": {
        "true": {"text": true_text, "color": true_colour, "index": 0},
        "false": {"text": false_text, "color": false_colour, "index": 1}}}


def device_variable(source: str, multi: bool) -> Json:
    """The ``device`` template variable: device tag values of measurement ``source``."""
    variable: Json = {
        "name": "device",
        "label": "Device",
        "type": "query",
        "datasource": DATASOURCE,
        "query": f'SHOW TAG VALUES FROM "{source}" WITH KEY = "device"',
        "definition": f'SHOW TAG VALUES FROM "{source}" WITH KEY = "device"',
        "refresh": 1,
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "current": {},
        "options": [],
        "regex": "",
        "hide": 0,
    }
    return variable


def findings_annotation() -> Json:
    """Evidence windows as region annotations, from each finding's start to its end.

    The query and column mapping sit both where Grafana's InfluxQL annotation editor puts them
    (``target``) and at the top level (the legacy form Grafana migrates from), so every
    Grafana 10/11 build reads them.
    """
    columns = {"titleColumn": "rule", "textColumn": "digest", "tagsColumn": "rule",
               "timeEndColumn": "end_ms"}
    query = ('SELECT "rule", "duration_s" / 60 AS "minutes", "events_counted", '
             '"end_ns" / 1000000 AS "end_ms", "digest" FROM "evidence_window" '
             f"WHERE {DEVICE_FILTER} AND $timeFilter")
    return {
        "name": "Findings",
        "datasource": DATASOURCE,
        "enable": True,
        "hide": False,
        "iconColor": "red",
        "query": query,
        **columns,
        "target": {"refId": "Findings", "query": query, "rawQuery": True,
                   "resultFormat": "table", "fromAnnotations": True, **columns},
    }


def dashboard(uid: str, title: str, description: str, panels: Sequence[Json],
              variables: Sequence[Json], annotations: Sequence[Json] = (),
              time_from: str = "now-6h") -> Json:
    """The dashboard model with panel ids numbered 1.. in order."""
    numbered = [{"id": index, **item} for index, item in enumerate(panels, start=1)]
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["barkwatch"],
        "timezone": "browser",
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": time_from, "to": "now"},
        "templating": {"list": list(variables)},
        "annotations": {"list": list(annotations)},
        "links": [{"title": "Barkwatch", "type": "dashboards", "tags": ["barkwatch"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "panels": numbered,
    }


def level_panel(grid: tuple[int, int, int, int]) -> Json:
    """LAeq, LAFmax and the background (LAF90 at the sensor, the analyzer's L90)."""
    where = f"WHERE {DEVICE_FILTER} AND $timeFilter GROUP BY time($__interval) fill(null)"
    return series_panel(
        "Sound level at the sensor",
        "A-weighted level at the sensor, dB. LAeq: energy mean per interval. LAFmax: the "
        "loudest fast-weighted moment in the interval. LAF90 (sensor): level exceeded 90 % "
        "of the last minute. Background L90: the analyzer's background estimate, the floor "
        "audibility is judged against. Red regions: evidence windows (findings).",
        grid,
        [target(f'SELECT mean("laeq_db") AS "LAeq", max("lafmax_db") AS "LAFmax", '
                f'mean("laf90_db") AS "LAF90 (sensor)" FROM "level" {where}',
                alias="$col"),
         target(f'SELECT mean("la90_db") AS "Background L90" FROM "background" {where}',
                ref="B", alias="$col")],
        unit="dB",
        overrides=[
            {"matcher": {"id": "byName", "options": "LAFmax"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}}]},
            {"matcher": {"id": "byName", "options": "LAeq"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "blue"}},
                            {"id": "custom.lineWidth", "value": 2}]},
            {"matcher": {"id": "byName", "options": "Background L90"},
             "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "green"}},
                            {"id": "custom.fillOpacity", "value": 15}]},
        ],
    )


def address() -> Json:
    """One device: levels, dog events, audibility and both rules' live progress."""
    events = f'FROM "dog_event" WHERE {DEVICE_FILTER} AND $timeFilter'
    progress = f'FROM "rule_progress" WHERE {DEVICE_FILTER} AND $timeFilter'
    episode = (f'SELECT last("episode_s") / 60 AS "Continuous episode" {progress}')
    stretch = (f'SELECT last("stretch_s") / 60 AS "Intermittent stretch" {progress}')
    continuous = thresholds((None, "green"), (CONTINUOUS_LIMIT_MIN * 0.7, "orange"),
                            (CONTINUOUS_LIMIT_MIN, "red"))
    intermittent = thresholds((None, "green"), (INTERMITTENT_LIMIT_MIN * 0.75, "orange"),
                              (INTERMITTENT_LIMIT_MIN, "red"))
    panels = [
        stat_panel("Continuous episode now",
                   "Length of the barking episode in progress (gaps under 1 min keep it "
                   "going), minutes. Red: over the 7-minute limit (Subd. 5). 0: none open. "
                   "Provisional: events of the last 2 minutes are still being ordered.",
                   (0, 0, 6, 4), [target(episode)], "m", continuous, decimals=1),
        stat_panel("Intermittent stretch now",
                   "Length of the stretch of plainly audible intermittent barking in "
                   "progress (gaps under 10 min keep it going), minutes. Red: over the "
                   "60-minute limit (Subd. 5). 0: none open.",
                   (6, 0, 6, 4), [target(stretch)], "m", intermittent, decimals=1),
        stat_panel("Dog vocalizations in range",
                   "Number of dog vocalization events the classifier detected in the "
                   "selected time range.",
                   (12, 0, 6, 4), [target(f'SELECT count("duration_s") AS "events" {events}')],
                   "none", thresholds((None, "blue"))),
        stat_panel("Loudest event 100 ft beyond the boundary",
                   "Highest estimated LAeq of a dog event 100 ft beyond the property "
                   "boundary in the range, dB (owner's-favour propagation).",
                   (18, 0, 6, 4),
                   [target(f'SELECT max("level_at_100ft_db") AS "at 100 ft" {events}')],
                   "dB", thresholds((None, "blue")), decimals=1),
        level_panel((0, 4, 24, 9)),
        panel("state-timeline", "Dog vocalizations",
              "When dogs were heard: red where at least one dog vocalization event starts "
              "in the interval, green where none does.",
              (0, 13, 24, 4),
              [target(f'SELECT count("duration_s") AS "dog events" {events} '
                      "GROUP BY time($__interval) fill(0)", alias="$col")],
              defaults={"color": {"mode": "thresholds"},
                        "thresholds": thresholds((None, "green"), (1, "red")),
                        "mappings": [
                            {"type": "value", "options": {"0": {"text": "quiet",
                                                                "color": "green"}}},
                            {"type": "range", "options": {"from": 1, "to": None, "result": {
                                "text": "barking", "color": "red"}}}]},
              options={"showValue": "never", "mergeValues": True, "rowHeight": 0.8,
                       "legend": {"showLegend": False}}),
        series_panel("Continuous rule: episode length",
                     "Length of the current barking episode, minutes, against the 7-minute "
                     "limit (dashed red line). A finding is made when an episode ends after "
                     "lasting more than 7 minutes.",
                     (0, 17, 12, 8),
                     [target(f'SELECT max("episode_s") / 60 AS "episode" {progress} '
                             "GROUP BY time($__interval) fill(null)", alias="$col")],
                     "m", limit=thresholds((None, "transparent"),
                                           (CONTINUOUS_LIMIT_MIN, "red"))),
        series_panel("Intermittent rule: stretch length",
                     "Length of the current stretch of plainly audible intermittent barking, "
                     "minutes, against the 60-minute limit (dashed red line).",
                     (12, 17, 12, 8),
                     [target(f'SELECT max("stretch_s") / 60 AS "stretch" {progress} '
                             "GROUP BY time($__interval) fill(null)", alias="$col")],
                     "m", limit=thresholds((None, "transparent"),
                                           (INTERMITTENT_LIMIT_MIN, "red"))),
        series_panel("Dog vocalizations per minute",
                     "Number of dog vocalization events starting in each minute.",
                     (0, 25, 12, 8),
                     [target(f'SELECT count("duration_s") AS "events per minute" {events} '
                             "GROUP BY time(1m) fill(0)", alias="$col")],
                     "none", style="bars"),
        series_panel("Estimated level 100 ft beyond the boundary",
                     "Each dog event's LAeq (and LAFmax) estimated 100 ft beyond the property "
                     "boundary from the installation record, dB, in the owner's favour. "
                     "Background L90 there is what it has to stand out from.",
                     (12, 25, 12, 8),
                     [target('SELECT "level_at_100ft_db" AS "LAeq at 100 ft", '
                             '"lafmax_at_100ft_db" AS "LAFmax at 100 ft", '
                             f'"background_la90_db" AS "background L90" {events}',
                             alias="$col")],
                     "dB", style="points"),
        series_panel("Audibility margin",
                     "How far each dog event stands out 100 ft beyond the boundary: margin "
                     "over the larger of the threshold of hearing and the background in the "
                     "best band of the dog's vocal range, after the uncertainty, dB. At or "
                     "above the dashed line (10 dB) the event is plainly audible and counts "
                     "for the intermittent rule.",
                     (0, 33, 24, 8),
                     [target(f'SELECT "audibility_margin_db" AS "margin" {events}',
                             alias="$col")],
                     "dB", style="points",
                     limit=thresholds((None, "transparent"), (AUDIBLE_MARGIN_DB, "red"))),
    ]
    return dashboard("barkwatch-address", "Barkwatch · Address",
                     "One device: what it measured, what it heard and how close each rule is "
                     "to its limit.", panels, [device_variable("level", multi=False)],
                     [findings_annotation()])


def findings() -> Json:
    """Evidence windows: when, which rule, how long, how many events, margins and digests."""
    windows = f'FROM "evidence_window" WHERE {DEVICE_FILTER} AND $timeFilter'
    table_columns = [
        unit_override("duration_s", "s", displayName="duration"),
        unit_override("end_ms", "dateTimeAsIso", displayName="end"),
        unit_override("longest_gap_s", "s", displayName="longest gap"),
        unit_override("laeq_db", "dB", displayName="LAeq"),
        unit_override("lafmax_db", "dB", displayName="LAFmax"),
        unit_override("level_at_100ft_db_max", "dB", displayName="max at 100 ft"),
        unit_override("audibility_margin_db_min", "dB", displayName="margin min"),
        unit_override("audibility_margin_db_max", "dB", displayName="margin max"),
        unit_override("uncertainty_db", "dB", displayName="uncertainty"),
        unit_override("uncovered_s", "s", displayName="coverage gaps",
                      custom_cellOptions={"type": "color-background"},
                      thresholds=thresholds((None, "green"), (1, "orange"))),
    ]
    panels = [
        stat_panel("Findings in range",
                   "Completed findings (evidence windows) in the selected range, per rule.",
                   (0, 0, 8, 4),
                   [target(f'SELECT count("duration_s") {windows} GROUP BY "rule"',
                           alias="$tag_rule")],
                   "none", thresholds((None, "green"), (1, "red"))),
        stat_panel("Longest finding",
                   "Duration of the longest finding in the range.",
                   (8, 0, 8, 4), [target(f'SELECT max("duration_s") AS "longest" {windows}')],
                   "s", thresholds((None, "blue"))),
        stat_panel("Events counted in findings",
                   "Dog events the findings in the range rest on (counted by their rule).",
                   (16, 0, 8, 4),
                   [target(f'SELECT sum("events_counted") AS "events" {windows}')],
                   "none", thresholds((None, "blue"))),
        panel("table", "Evidence windows",
              "One row per finding. Time: the finding's start; end: its end. Events: counted "
              "by the rule / in the span / plainly audible at 100 ft. Margins: smallest and "
              "largest audibility margin of the counted events. Coverage gaps: seconds inside "
              "the span with no measurement (orange when any). Digest: SHA-256 of the "
              "canonical evidence; prev digest chains it to the device's previous window "
              "(verify with `barkwatch findings recompute`).",
              (0, 4, 24, 10),
              [target('SELECT "device", "rule", "duration_s", "end_ns" / 1000000 AS "end_ms", '
                      '"events_counted", "events_in_span", "audible_events", "longest_gap_s", '
                      '"laeq_db", "lafmax_db", "level_at_100ft_db_max", '
                      '"audibility_margin_db_min", "audibility_margin_db_max", '
                      '"uncertainty_db", "uncovered_s", "reading", "digest", "prev_digest" '
                      f"{windows}", table=True)],
              defaults={"custom": {"align": "auto", "filterable": True},
                        "thresholds": thresholds((None, "text"))},
              overrides=table_columns,
              options={"showHeader": True, "sortBy": [{"displayName": "Time", "desc": True}],
                       "footer": {"show": False}}),
        series_panel("Finding durations",
                     "Each finding at its start, its duration in minutes, against the "
                     "7-minute (continuous) and 60-minute (intermittent) limits (dashed).",
                     (0, 14, 24, 8),
                     [target(f'SELECT "duration_s" / 60 AS "duration" {windows} '
                             'GROUP BY "rule"', alias="$tag_rule")],
                     "m", style="points",
                     limit=thresholds((None, "transparent"), (CONTINUOUS_LIMIT_MIN, "orange"),
                                      (INTERMITTENT_LIMIT_MIN, "red"))),
        level_panel((0, 22, 24, 9)),
    ]
    return dashboard("barkwatch-findings", "Barkwatch · Findings",
                     "Completed findings (evidence windows) with everything they rest on.",
                     panels, [device_variable("level", multi=True)], [findings_annotation()],
                     time_from="now-7d")


def fleet() -> Json:
    """Every device: online, last frame, calibration, dropped blocks, backlog, clock."""
    per_device = f"WHERE {DEVICE_FILTER} AND {HEALTH_WINDOW} GROUP BY \"device\""
    health = f'FROM "sensor_health" WHERE {DEVICE_FILTER} AND $timeFilter'
    health_table = [
        unit_override("calibration_date", "string", displayName="calibrated"),
        unit_override("dropped_blocks", "none", displayName="dropped blocks",
                      custom_cellOptions={"type": "color-background"},
                      thresholds=thresholds((None, "green"), (1, "red"))),
        unit_override("outbox_backlog", "none", displayName="outbox backlog",
                      custom_cellOptions={"type": "color-background"},
                      thresholds=thresholds((None, "green"), (60, "orange"), (600, "red"))),
        unit_override("clock_synchronised", "string", displayName="clock",
                      custom_cellOptions={"type": "color-background"},
                      mappings=[bool_mapping("synchronised", "green", "NOT synchronised",
                                             "red")]),
        unit_override("clock_max_error_us", "µs", displayName="clock max error"),
        unit_override("uptime_s", "s", displayName="uptime"),
        unit_override("software_version", "string", displayName="software"),
    ]
    panels = [
        stat_panel("Online",
                   "Each device's connection as the broker last reported it (its status "
                   "topic; 'offline' comes from the Last Will when it drops). Latest value of "
                   "the last 30 days, whatever the time range.",
                   (0, 0, 12, 5),
                   [target(f'SELECT last("online") AS "online" FROM "sensor_status" '
                           f"{per_device}", alias="$tag_device")],
                   mappings=[bool_mapping("online", "green", "OFFLINE", "red")],
                   steps=thresholds((None, "text"))),
        stat_panel("Last frame seen",
                   "Capture time of each device's latest stored level frame (frames are one "
                   "per second: more than a minute ago means no data is arriving).",
                   (12, 0, 12, 5),
                   [target(f'SELECT last("seq") AS "seq" FROM "level" {per_device}',
                           alias="$tag_device")],
                   "dateTimeFromNow", thresholds((None, "blue")), fields="/^Time$/"),
        panel("table", "Sensor health",
              "Each device's latest heartbeat (last 30 days). Calibrated: date of the last "
              "calibration. Dropped blocks: audio blocks lost at capture since start "
              "(red when any). Outbox backlog: frames waiting to be sent (orange over a "
              "minute, red over 10 minutes). Clock: whether the kernel reports the clock "
              "synchronised, and its maximum error; evidence depends on the time base.",
              (0, 5, 24, 7),
              [target('SELECT last("calibration_date") AS "calibration_date", '
                      'last("dropped_blocks") AS "dropped_blocks", '
                      'last("outbox_backlog") AS "outbox_backlog", '
                      'last("clock_synchronised") AS "clock_synchronised", '
                      'last("clock_max_error_us") AS "clock_max_error_us", '
                      'last("uptime_s") AS "uptime_s", '
                      'last("software_version") AS "software_version" '
                      f'FROM "sensor_health" {per_device}', table=True)],
              defaults={"custom": {"align": "auto"}, "thresholds": thresholds((None, "text"))},
              overrides=health_table,
              transformations=[{"id": "organize", "options": {
                  "excludeByName": {"Time": True}, "indexByName": {"device": 0}}}],
              options={"showHeader": True, "footer": {"show": False}}),
        series_panel("Dropped blocks",
                     "Audio blocks lost at capture (cumulative since the sensor started); any "
                     "rise means gaps in the measurement.",
                     (0, 12, 8, 8),
                     [target(f'SELECT max("dropped_blocks") {health} '
                             'GROUP BY time($__interval), "device" fill(null)',
                             alias="$tag_device")],
                     "none", limit=thresholds((None, "transparent"), (1, "red"))),
        series_panel("Outbox backlog",
                     "Frames stored on the sensor waiting to be sent (one per second of "
                     "audio); grows while the broker is unreachable.",
                     (8, 12, 8, 8),
                     [target(f'SELECT max("outbox_backlog") {health} '
                             'GROUP BY time($__interval), "device" fill(null)',
                             alias="$tag_device")],
                     "none", limit=thresholds((None, "transparent"), (600, "orange"))),
        series_panel("Clock maximum error",
                     "The kernel's maximum clock error, µs (adjtimex); large or growing "
                     "values mean the time base of the evidence is uncertain.",
                     (16, 12, 8, 8),
                     [target(f'SELECT max("clock_max_error_us") {health} '
                             'GROUP BY time($__interval), "device" fill(null)',
                             alias="$tag_device")],
                     "µs", limit=thresholds((None, "transparent"), (100000, "orange"))),
    ]
    return dashboard("barkwatch-fleet", "Barkwatch · Fleet",
                     "Every sensor: connection, data flow, calibration and clock.",
                     panels, [device_variable("sensor_health", multi=True)], time_from="now-24h")


def build() -> dict[str, Json]:
    """Every dashboard by file name."""
    return {"address.json": address(), "findings.json": findings(), "fleet.json": fleet()}


def render(model: Json) -> str:
    """The committed text of a dashboard."""
    return json.dumps(model, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dashboards (or, with ``--check``, report stale ones); exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed JSON instead of writing it")
    parser.add_argument("--out", type=Path, default=JSON_DIR, help="output folder")
    args = parser.parse_args(argv)
    stale = []
    for name, model in build().items():
        path = args.out / name
        text = render(model)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale dashboards (run dashboards/generate.py): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
