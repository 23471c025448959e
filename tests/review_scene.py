"""A case and its evidence in a real InfluxDB for the review application's tests and benchmark:
levels, events and sealed windows stored as the live analyzer stores them (live_replay), the
rules' progress every 10 s, the device's status and a heartbeat; a case file with an address,
the device placed there, an earlier complaint, the complaint with its windows linked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from influxdb_client import Point, WritePrecision

from analyzer.cases import CaseFile, candidate_windows, parse_local_time
from analyzer.ordinance import RuleEvent
from analyzer.ordinance.rules import RuleEngine, RuleSettings
from analyzer.store import InfluxClient, health_point, progress_point, status_point
from tests.live_replay import store_as_live

NS = 1_000_000_000
DEVICE = "glencoe-0007"
T0 = parse_local_time("2026-06-01 20:00")
COMPLAINANT, CONTACT = "Ann Neighbour", "555-0101"
OFFICER = "Ofc. Lund"


def bark(t_s: int) -> RuleEvent:
    """A 1-s bark at T0 + t_s, plainly audible 100 ft away."""
    return RuleEvent(DEVICE, T0 + t_s * NS, T0 + t_s * NS + NS, "bark", 0.93, 68.0, 80.5,
                     "yamnet-head-1", plainly_audible=True, audibility_margin_db=9.5,
                     level_at_100ft_db=41.2, uncertainty_db=3.2, audibility_score=0.9)


# The scene's barks 5 min apart each count alone, as every plainly audible event did before
# issue 39's company: its windows say so in their parameters (and still verify).
LONE_BARKS = RuleSettings(intermittent_company_s=0.0)


def evening_barks() -> list[int]:
    """8 min of a bark every 20 s (continuous rule), then 75 min of one every 5 min
    (intermittent rule): the scene of tests/test_report.py."""
    return sorted({*range(0, 481, 20), *range(1200, 5701, 300)})


def store_evidence(client: InfluxClient, barks: list[int], seconds: int) -> int:
    """Levels (70 dB in a bark's second, else 42 dB), events and windows, the progress every
    10 s, an online status and a heartbeat; returns the number of windows sealed."""
    bark_set = set(barks)

    def level(second: int, time_ns: int) -> Point:
        loud = second in bark_set
        return (Point("level").tag("device", DEVICE).field("seq", second)
                .field("laeq_db", 70.0 if loud else 42.0)
                .field("lafmax_db", 78.0 if loud else 45.0)
                .field("calibration_date", "2026-05-20").field("full_scale_db", 120.0)
                .field("max_dog_score", 0.9 if loud else 0.05)
                .time(time_ns, WritePrecision.NS))

    events = [bark(t) for t in barks]
    windows = store_as_live(client, DEVICE, events, T0, seconds, level, settings=LONE_BARKS)
    engine, pending, lines = RuleEngine(DEVICE, LONE_BARKS), list(events), []
    for step in range(0, seconds, 10):
        now = T0 + (step + 10) * NS
        engine.observe_coverage(T0 + step * NS, now)
        while pending and pending[0].offset_ns <= now:
            engine.add_event(pending.pop(0))
        engine.advance(now)
        lines.append(progress_point(engine.progress(now)).to_line_protocol())
    end = T0 + seconds * NS
    lines.append(status_point(DEVICE, True, T0 - 60 * NS).to_line_protocol())
    lines.append(health_point(DEVICE, {
        "time_ns": end - NS, "uptime_s": float(seconds), "clock_synchronised": True,
        "outbox_backlog": 0, "lost_samples": 0, "software_version": "0.1.0"})
        .to_line_protocol())
    client.write_lines(lines)
    return windows


@dataclass
class Case:
    """The case file and the complaint in it."""

    db: Path
    complaint: int
    address: int
    links: int


def file_case(db: Path, client: InfluxClient, day: int = 0, span_end_s: int = 1800,
              removed_s: int | None = None) -> Case:
    """An address with the device (placed a day before T0, removed at T0 + ``removed_s``), a
    complaint the day before, and the complaint about [T0 - 5 min, T0 + span_end_s] of day
    ``day`` received 10 min after T0 that day, its covering windows linked."""
    d = day * 86400 * NS
    removed = None if removed_s is None else T0 + removed_s * NS
    with CaseFile(db) as store:
        address = store.add_address("12 Elm St", OFFICER, owner_name="R. Owner")
        store.place_device(address, DEVICE, T0 - 86400 * NS, OFFICER, removed)
        store.open_complaint(address, "Cy Earlier", "555-0100", T0 - 86400 * NS,
                             T0 - 87000 * NS, T0 - 86000 * NS, True, OFFICER)
        complaint = store.open_complaint(address, COMPLAINANT, CONTACT, d + T0 + 600 * NS,
                                         d + T0 - 300 * NS, d + T0 + span_end_s * NS, True,
                                         OFFICER)
        found = candidate_windows(client, store.complaint(complaint),
                                  store.placements(address))
        for stored in found:
            w = stored.window
            store.add_link(complaint, w.device_id, w.rule, w.start_ns,
                           int(stored.fields["end_ns"]), w.digest, OFFICER)
    return Case(db, complaint, address, len(found))


def evidence_with_case(influx_url: str, db: Path, username: str, officer: str,
                       password_hash: str) -> Case:
    """The review tests' common scene: the database with the evening's evidence (2 windows),
    the case file with the complaint linked to them, and one administrator account."""
    from analyzer.cases import add_account
    from analyzer.store import InfluxSettings

    client = InfluxClient(InfluxSettings(url=influx_url))
    client.create_database()
    windows = store_evidence(client, evening_barks(), 6500)
    case = file_case(db, client)
    assert windows == case.links == 2
    with CaseFile(db) as store:
        add_account(store, username, officer, password_hash, "admin")
    return case
