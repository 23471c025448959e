"""Event review on the finding page (issue 35, item 2), against the real server of
tests/test_review_http.py (uvicorn, real InfluxDB, real case file) and the real ``barkwatch case
verdict`` command: the events table, verdicts recorded and audited, the finding judged again
without the rejected events, refused verdicts, and roles.

The scene (tests/review_scene.py): link 1 is the continuous finding, a 1-s bark every 20 s
from 20:00:00 to 20:08:00 CDT (481 s, 25 events); link 2 the intermittent one, a bark every
5 min from 20:20:00 to 21:35:00 (4,501 s, 16 events)."""

from __future__ import annotations

import contextlib
import html
import io
import re
from pathlib import Path

from analyzer.cases import ADMINISTRATOR, CaseFile, add_account
from analyzer.cases.verdicts import event_verdicts, finding_events, judge_event
from analyzer.cli.main import main
from analyzer.review import hash_password
from analyzer.store import InfluxClient, InfluxSettings
from tests.review_scene import COMPLAINANT, T0, file_case
from tests.test_review_http import OFFICER, PASSWORD, Browser, Server, server

__all__ = ["server"]  # the module-scoped server fixture, one for this module

NS = 1_000_000_000
CONTINUOUS, INTERMITTENT = 1, 2


def _finding(server: Server, link: int) -> str:
    return f"/cases/{server.case.complaint}/findings/{link}"


def _row(body: str, row_id: str) -> str:
    found = re.search(rf'<tr id="{row_id}"[^>]*>.*?</tr>', body, re.S)
    assert found, row_id
    return found.group(0)


def _cells(body: str, row_id: str) -> list[str]:
    """The texts of a table row's cells, tags removed and whitespace collapsed."""
    cells = re.findall(r"<td[^>]*>(.*?)</td>", _row(body, row_id), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]


def _rejudged(body: str) -> list[str]:
    return _cells(body, "sensitivity-rejudged")


def _anchor(t_s: int) -> str:
    return f"event-{T0 + t_s * NS}-bark"


def _verdict(browser: Browser, server: Server, link: int, t_s: int, verdict: str,
             reason: str = "") -> tuple[int, str, str]:
    return browser.request(_finding(server, link) + "/verdict", {
        "csrf_token": browser.token, "onset_ns": str(T0 + t_s * NS), "label": "bark",
        "verdict": verdict, "reason": reason})


def _signed_in(server: Server) -> Browser:
    browser = Browser(server.base)
    assert browser.sign_in()[0] == 303
    return browser


def test_the_finding_page_lists_each_event_to_the_second_with_its_levels(
        server: Server) -> None:
    browser = _signed_in(server)
    status, _, body = browser.request(_finding(server, INTERMITTENT))
    assert status == 200
    rows = re.findall(r'<tr id="event-(\d+)-bark"', body)
    assert [int(t) for t in rows] == [T0 + t * NS for t in range(1200, 5701, 300)]
    number, time, duration, label, confidence, at_sensor, at_100ft, audible, counted, \
        verdict = _cells(body, _anchor(1500))
    assert (number, time) == ("2", "2026-06-01 20:25:00 CDT (2026-06-02 01:25:00 UTC)")
    assert (duration, label, confidence) == ("1.0 s", "bark", "0.93")
    assert (at_sensor, at_100ft, audible, counted) == ("68.0 / 80.5 dB", "41.2 dB ± 3.2",
                                                       "yes", "yes")
    assert verdict.startswith("not reviewed")
    assert "Bearing" not in body  # no event carries one yet: no column, nothing made up
    assert _cells(body, "sensitivity-as-sealed") == [
        "As sealed (gap under 600 s)", "still met", "4501.0 s (75.0 min)", "16"]
    assert _rejudged(body)[:4] == ["Without the 0 rejected events", "still met",
                                   "4501.0 s (75.0 min) 2026-06-01 20:20:00 CDT (2026-06-02 "
                                   "01:20:00 UTC) to 2026-06-01 21:35:01 CDT (2026-06-02 "
                                   "02:35:01 UTC)", "16"]


def test_the_finding_page_says_the_sector_was_not_entered_and_draws_no_bearing_plot(
        server: Server) -> None:
    # the scene's device has no premises' sector in its windows and no event a bearing
    # (issue 36; tests/test_report_bearings.py has a window with both)
    status, _, body = _signed_in(server).request(_finding(server, INTERMITTENT))
    assert status == 200
    assert ("<td>From the premises&#39; sector (whose dog)</td><td>the premises&#x27; sector "
            "is not entered in the installation record: no event is attributed (of the "
            "counted events 0 from the sector, 0 from elsewhere, 16 with no bearing)</td>"
            in body)
    assert 'id="bearing-plot"' not in body


def test_rejecting_the_first_barks_until_the_episode_is_seven_minutes_or_less_ends_the_finding(
        server: Server) -> None:
    browser = _signed_in(server)
    browser.request(_finding(server, CONTINUOUS))
    for t_s in (0, 20, 40):
        status, location, _ = _verdict(browser, server, CONTINUOUS, t_s, "rejected",
                                       f"a door at {t_s} s")
        assert (status, location) == (303, _finding(server, CONTINUOUS) + "#events")
    _, _, body = browser.request(_finding(server, CONTINUOUS))
    assert "Recorded verdict #" in body  # the flash after the redirect
    assert _rejudged(body)[1:4:2] == ["still met", "22"]  # 20:01:00 to 20:08:01 is 7:01
    assert _rejudged(body)[2].startswith("421.0 s (7.0 min)")
    assert "rejected" in _row(body, _anchor(20)) and "a door at 20 s" in _row(body, _anchor(20))
    _verdict(browser, server, CONTINUOUS, 60, "rejected", "a neighbour's dog")
    _, _, body = browser.request(_finding(server, CONTINUOUS))
    assert _rejudged(body)[:2] == ["Without the 4 rejected events", "not met"]
    assert _rejudged(body)[2].startswith("401.0 s (6.7 min)") and _rejudged(body)[3] == "21"
    with CaseFile(server.case.db) as store:
        audit = [e for e in store.audit(server.case.complaint)
                 if e.entity == "event_verdicts"]
    assert [(e.action, e.actor) for e in audit] == [("rejected event", OFFICER)] * 4
    assert '"reason": "a neighbour\'s dog"' in audit[-1].detail
    # the officer thinks again: a later verdict confirms the bark at 20:01:00 and supersedes
    _verdict(browser, server, CONTINUOUS, 60, "confirmed")
    _, _, body = browser.request(_finding(server, CONTINUOUS))
    assert _rejudged(body)[:2] == ["Without the 3 rejected events", "still met"]
    with CaseFile(server.case.db) as store:
        history = event_verdicts(store, CONTINUOUS)
        audit = [e for e in store.audit(server.case.complaint)
                 if e.entity == "event_verdicts"]
    assert [(v.verdict, v.supersedes) for v in history][-2:] == [
        ("rejected", None), ("confirmed", history[-2].id)]
    assert audit[-1].action == f"confirmed event (supersedes verdict {history[-2].id})"
    assert len(re.findall(r"<tr><td>\d+</td>", body.split('id="verdict-history"')[1])) == 5


def test_a_refused_verdict_comes_back_beside_its_form_with_what_was_typed(
        server: Server) -> None:
    browser = _signed_in(server)
    browser.request(_finding(server, INTERMITTENT))
    with CaseFile(server.case.db) as store:
        before = len(event_verdicts(store, INTERMITTENT))
    reason = "a door slamming <twice> & a shout"
    status, _, body = _verdict(browser, server, INTERMITTENT, 1500, "", reason)
    assert status == 400
    form = _row(body, _anchor(1500))
    assert 'id="form-error"' in form and "The verdict was not recorded" in form
    assert "verdict &#39;&#39; is not one of confirmed, rejected" in form
    assert f'value="{html.escape(reason)}" autofocus' in form  # kept, escaped
    assert 'id="form-error"' not in _row(body, _anchor(1800))
    status, _, body = _verdict(browser, server, INTERMITTENT, 1500, "rejected", "  ")
    form = _row(body, _anchor(1500))
    assert status == 400 and "a rejected event needs a reason" in form
    assert '<option value="rejected" selected>' in form
    status, _, body = _verdict(browser, server, INTERMITTENT, 1501, "confirmed", reason)
    assert status == 400 and body.count('id="form-error"') == 1
    assert "the finding has no event at 2026-06-01 20:25:01 CDT" in body
    with CaseFile(server.case.db) as store:
        assert len(event_verdicts(store, INTERMITTENT)) == before


def test_an_administrator_sees_the_events_but_cannot_set_a_verdict(server: Server) -> None:
    with CaseFile(server.case.db) as store:
        add_account(store, "adm-events", "C. Admin", hash_password(PASSWORD), "admin",
                    ADMINISTRATOR)
        before = len(event_verdicts(store, INTERMITTENT))
    browser = Browser(server.base)
    assert browser.sign_in(PASSWORD, "adm-events")[0] == 303
    status, _, body = browser.request(_finding(server, INTERMITTENT))
    assert status == 200 and 'id="verdicts-by-officers"' in body
    assert len(re.findall(r'<tr id="event-', body)) == 16 and "verdict-form" not in body
    status, _, body = _verdict(browser, server, INTERMITTENT, 1500, "rejected", "by the admin")
    assert status == 403 and "Only an officer&#39;s account records evidence" in body
    with CaseFile(server.case.db) as store:
        assert len(event_verdicts(store, INTERMITTENT)) == before


def test_the_command_line_sets_verdicts_through_the_same_call_and_judges_again(
        server: Server) -> None:
    assert server.review is not None
    args = ["--db", str(server.case.db), "--influx-url", server.review.settings.influx.url]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["case", "verdict", str(server.case.complaint), "--link", "2", "--event",
                     "2026-06-01 20:25:00", "--rejected", "--reason", "a bird",
                     "--officer", "Ofc. Lund", *args]) == 0
        # 20:20:01 to 20:35:00 is 899 s without a counted bark: split, and the rest, 20:35:00
        # to 21:35:01, is 3,601 s: still more than an hour
        assert main(["case", "verdict", str(server.case.complaint), "--link", "2", "--event",
                     str(T0 + 1800 * NS), "--rejected", "--reason", "a bird again",
                     "--officer", "Ofc. Lund", *args]) == 0
        assert main(["case", "events", str(server.case.complaint), "--link", "2", *args]) == 0
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"verdict #\d+: the event at 2026-06-01 20:25:00 CDT \(2026-06-02 "
                        r"01:25:00 UTC\) rejected", lines[0])
    assert "without the 1 rejected event(s): STILL MET, longest 4501.0 s" in lines[1]
    assert "without the 2 rejected event(s): STILL MET, longest 3601.0 s (limit: more than " \
        "3600 s), 13 events counted" in lines[3]
    assert "REJECTED by Ofc. Lund: a bird again" in out.getvalue()
    assert lines[-1] == lines[3]
    # the finding page shows the same verdicts and the same re-judged finding
    browser = _signed_in(server)
    _, _, body = browser.request(_finding(server, INTERMITTENT))
    assert _rejudged(body)[:2] == ["Without the 2 rejected events", "still met"]
    assert _rejudged(body)[2].startswith("3601.0 s (60.0 min)")


def test_the_report_lists_every_verdict_and_the_finding_judged_again(
        server: Server, tmp_path: Path) -> None:
    from analyzer.reports import gather, render_html  # matplotlib: only here

    assert server.review is not None
    client = InfluxClient(InfluxSettings(url=server.review.settings.influx.url))
    case = file_case(tmp_path / "cases.sqlite", client)  # its own case file, same evidence
    with CaseFile(case.db) as store:
        link = store.links(case.complaint)[0]
        assert link.rule == "continuous"
        events = finding_events(client, link)
        for t_s in (0, 20, 40, 60):
            judge_event(store, link, events, T0 + t_s * NS, "rejected",
                        f"a door at {t_s} s, said {COMPLAINANT}", "Ofc. Lund")
        judge_event(store, link, events, T0 + 60 * NS, "confirmed", "", "Ofc. Kay")
        report = render_html(gather(store, case.complaint, client))
        redacted = render_html(gather(store, case.complaint, client, redacted=True))
    section = report.split("<h2>9. The officer's review of the events</h2>")[1]
    first, second = section.split("<h3>9.2 ")
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", first)).split())
    assert "25 events in the span: 1 confirmed, 3 rejected, 21 not reviewed" in text
    assert text.count("in force") == 4 and "replaced by #5" in text
    assert f"a door at 60 s, said {COMPLAINANT}" in text
    assert ("Without the 3 rejected events still met 421.0 s (7.0 min), 2026-06-01 20:01:00 "
            "CDT (2026-06-02 01:01:00 UTC) to 2026-06-01 20:08:01 CDT (2026-06-02 01:08:01 "
            "UTC) 22") in text
    assert "As sealed met 481.0 s (8.0 min) 25" in text
    assert "No verdict has been recorded on these events" in second
    assert COMPLAINANT not in redacted.split("9. The officer")[1]
    assert "a door at 60 s, said [withheld]" in redacted
