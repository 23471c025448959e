"""The overview, the app's first page (issue 35: "what happened today", as Frigate's review and
BirdNET-Pi's pages open): every device placed now, up, late or silent, with its last frame,
calibration and clock; the findings of the last days that no complaint links yet; the open
cases; and a search over case numbers, addresses and complainants (a search that can match a
complainant's name is an identity view, audited as one)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from analyzer.cases import CaseStore, Complaint, Placement
from analyzer.review.context import IDENTITY_VIEWED, Review
from analyzer.review.queries import DeviceState, device_state
from analyzer.review.sessions import OfficerSession
from analyzer.store import load_windows

NS = 1_000_000_000
# The sensor sends a frame a second and keeps what it could not send in its outbox: two
# minutes without a stored frame is late (a network outage the outbox will fill), an hour
# silent (the device needs a visit).
LATE_AFTER_S = 120
SILENT_AFTER_S = 3600
NEW_FINDINGS_DAYS = 7
MAX_SEARCH_CHARS = 100


@dataclass(frozen=True)
class DeviceNow:
    """One placed device as the overview shows it."""

    placement: Placement
    premises: str
    state: DeviceState
    condition: str  # up, late, silent

    @property
    def clock_synchronised(self) -> bool | None:
        """The last heartbeat's clock state (None: no heartbeat)."""
        beat = self.state.last_heartbeat
        return bool(beat["clock_synchronised"]) if beat.get("clock_synchronised") is not None \
            else None


def condition(state: DeviceState, now_ns: int) -> str:
    """up: a frame in the last two minutes and not reported offline; late: within the hour;
    silent: none for an hour, none at all, or the broker says it went offline."""
    if state.last_frame_ns is None:
        return "silent"
    age_s = (now_ns - state.last_frame_ns) / NS
    if age_s > SILENT_AFTER_S:
        return "silent"
    if age_s > LATE_AFTER_S or state.online is False:
        return "late"
    return "up"


@dataclass(frozen=True)
class NewFinding:
    """A stored finding of a placed device that no complaint links."""

    device_id: str
    premises: str
    address_id: int
    rule: str
    start_ns: int
    end_ns: int
    covering: list[int]  # complaints at the address whose span it overlaps


def _devices(review: Review, store: CaseStore, now: int) -> list[DeviceNow]:
    premises = {a.id: a.premises for a in store.addresses()}
    placed = [p for address_id in premises for p in store.placements(address_id)
              if p.removed_ns is None or p.removed_ns > now]
    devices = []
    for p in placed:
        state = device_state(review.client, p.device_id, now, now)  # no coverage: quick
        devices.append(DeviceNow(p, premises[p.address_id], state, condition(state, now)))
    order = {"silent": 0, "late": 1, "up": 2}
    return sorted(devices, key=lambda d: (order[d.condition], d.premises, d.placement.device_id))


def _new_findings(review: Review, store: CaseStore, devices: list[DeviceNow],
                  now: int) -> list[NewFinding]:
    complaints = store.complaints()
    linked = {link.digest for c in complaints for link in store.links(c.id)}
    since = now - NEW_FINDINGS_DAYS * 86400 * NS
    found: list[NewFinding] = []
    for d in devices:
        start = max(since, d.placement.placed_ns)
        for stored in load_windows(review.client, d.placement.device_id, start, now):
            if stored.window.digest in linked:
                continue
            end_ns = int(stored.fields["end_ns"])
            covering = [c.id for c in complaints if c.address_id == d.placement.address_id
                        and c.span_start_ns <= end_ns and stored.window.start_ns <= c.span_end_ns]
            found.append(NewFinding(d.placement.device_id, d.premises, d.placement.address_id,
                                    stored.window.rule, stored.window.start_ns, end_ns,
                                    covering))
    return sorted(found, key=lambda f: -f.start_ns)


def search(store: CaseStore, query: str) -> tuple[list[Complaint], bool]:
    """Complaints whose number, premises or complainant matches ``query`` (case-insensitive
    substring; ``#12`` or ``12`` a case number); and whether any matched on a complainant."""
    wanted = query.strip().lower()
    if not wanted:
        return [], False
    premises = {a.id: a.premises.lower() for a in store.addresses()}
    number = wanted.lstrip("#")
    matched, by_person = [], False
    for c in store.complaints():
        person = wanted in c.complainant_name.lower() or wanted in c.complainant_contact.lower()
        if (number.isdigit() and int(number) == c.id) or wanted in premises[c.address_id] \
                or person:
            matched.append(c)
            by_person = by_person or person
    return matched, by_person


def overview_page(review: Review, request: Request, session: OfficerSession) -> Response:
    """Devices now, new findings, open cases, and the search's results (``?q=``)."""
    now = review.clock()
    query = request.query_params.get("q", "")[:MAX_SEARCH_CHARS]
    with review.case_file() as store:
        devices = _devices(review, store, now)
        findings = _new_findings(review, store, devices, now)
        premises = {a.id: a.premises for a in store.addresses()}
        open_cases = [c for c in store.complaints() if not store.dispositions(c.id)]
        results, by_person = search(store, query)
        if results:
            # The results show complainants: each one is an identity view (section 8).
            store.record_access(session.officer, IDENTITY_VIEWED, "complaints",
                                [c.id for c in results],
                                {"page": request.url.path, "query": query,
                                 "matched_on_complainant": by_person,
                                 "username": session.username})
    counts = {name: sum(d.condition == name for d in devices) for name in ("up", "late",
                                                                           "silent")}
    return review.render(request, "overview.html", {
        "devices": devices, "counts": counts, "findings": findings,
        "open_cases": sorted(open_cases, key=lambda c: -c.received_ns), "premises": premises,
        "query": query, "results": results, "now_ns": now, "days": NEW_FINDINGS_DAYS,
        "late_s": LATE_AFTER_S, "silent_s": SILENT_AFTER_S})
