"""``barkwatch case events`` and ``barkwatch case verdict``: the officer's review of a linked
finding's events from the command line, through the same calls as the review application's
finding page (:mod:`analyzer.cases.verdicts`; each verdict and its audit entry in one
transaction). Registered by :mod:`analyzer.cli.case`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from analyzer.cases import CaseError, CaseStore, EvidenceLink, format_time
from analyzer.cases.localtime import TimeInputError, parse_local_time
from analyzer.cases.store import shown_safely
from analyzer.cli.options import add_influx_options, influx_client

NS = 1_000_000_000
ActionFactory = Callable[..., argparse.ArgumentParser]


def add_verdict_parsers(actions: Any, action: ActionFactory) -> None:
    """Add ``events`` and ``verdict`` to ``barkwatch case`` (``action``: case.py's factory
    of an action's parser with --db, CASE and --officer)."""
    events = action(actions, "events", "list a linked finding's events with the officer's "
                    "verdicts, and the finding judged again without the rejected ones",
                    officer=False)
    events.add_argument("--link", type=int, required=True, metavar="N",
                        help="evidence link number (barkwatch case show lists them)")
    add_influx_options(events)

    verdict = action(actions, "verdict", "confirm an event of a linked finding, or reject it "
                     "with a reason; a later verdict on the same event replaces the earlier "
                     "(both stay in the history and the audit log)")
    verdict.add_argument("--link", type=int, required=True, metavar="N",
                         help="evidence link number (barkwatch case show lists them)")
    verdict.add_argument("--event", required=True, metavar="ONSET",
                         help="the event's onset: its time to the second as 'case events' "
                         "prints it (Chicago local unless a zone is given) or its onset in "
                         "ns since 1970")
    verdict.add_argument("--label", default=None,
                         help="the event's label, when two events start in that second")
    which = verdict.add_mutually_exclusive_group(required=True)
    which.add_argument("--confirmed", dest="verdict", action="store_const", const="confirmed",
                       help="the officer confirms it is this dog's noise")
    which.add_argument("--rejected", dest="verdict", action="store_const", const="rejected",
                       help="the officer rejects it (--reason required)")
    verdict.add_argument("--reason", default="", help="why (required with --rejected)")
    add_influx_options(verdict)


def _link(store: CaseStore, complaint_id: int, link_id: int) -> EvidenceLink:
    store.complaint(complaint_id)
    for link in store.links(complaint_id):
        if link.id == link_id:
            return link
    raise CaseError(f"complaint {complaint_id} has no evidence link {link_id} (barkwatch case "
                    "show lists them)")


def _onset(text: str, onsets: list[int]) -> int:
    """The onset ``text`` names: ns since 1970 as printed, or a time to the second."""
    if text.strip().isdigit():
        return int(text)
    try:
        second = parse_local_time(text, "--event")
    except TimeInputError as exc:
        raise CaseError(str(exc)) from exc
    within = sorted({t for t in onsets if second <= t < second + NS})
    if len(within) > 1:
        raise CaseError(f"{len(within)} events start in {format_time(second)}: name one by its "
                        f"onset in ns ({', '.join(str(t) for t in within)})")
    return within[0] if within else second


def _say_rejudged(review: Any) -> None:
    again = review.rejudged
    if again is None:
        print("the stored window cannot be read: the finding is not judged again")
        return
    rejected = len(review.rejected)
    print(f"as sealed: {review.stored['duration_s']:.1f} s, {review.stored['events_counted']} "
          f"events counted; without the {rejected} rejected event(s): "
          f"{'STILL MET' if again.holds else 'NOT MET'}, longest {again.longest_s:.1f} s "
          f"(limit: more than {again.limit_s:.0f} s), {again.events_counted} events counted"
          + (f", {again.parts_holding} parts over the limit" if again.parts_holding > 1
             else ""))


def run_events(args: argparse.Namespace, store: CaseStore) -> int:
    """Print the finding's events with their verdicts, then the re-judged finding."""
    from analyzer.cases.verdicts import review_events, stored_fields

    link = _link(store, args.complaint, args.link)
    client = influx_client(args)
    review = review_events(store, client, link, stored_fields(client, link))
    print(f"{link.rule} finding on {link.device_id}, {format_time(link.start_ns)} to "
          f"{format_time(link.end_ns)}: {len(review.events)} events")
    for number, e in enumerate(sorted(review.events, key=lambda ev: ev.key), 1):
        v = review.verdicts.get((e.onset_ns, e.label))
        at_100ft = ("not assessed" if e.level_at_100ft_db is None
                    else f"{e.level_at_100ft_db:.1f} dB")
        audible = ("not assessed" if e.plainly_audible is None
                   else "yes" if e.plainly_audible else "no")
        verdict = "not reviewed" if v is None else (
            f"{v.verdict.upper()} by {v.officer}" + (f": {v.reason}" if v.reason else ""))
        print(shown_safely(
            f"{number:4d}  {format_time(e.onset_ns)}  onset {e.onset_ns}  "
            f"{(e.offset_ns - e.onset_ns) / NS:.1f} s  {e.label}  conf {e.confidence:.2f}  "
            f"LAeq {e.laeq_db:.1f} LAFmax {e.lafmax_db:.1f} dB  100 ft {at_100ft}  "
            f"audible {audible}  {verdict}"))
    _say_rejudged(review)
    return 0


def run_verdict(args: argparse.Namespace, store: CaseStore) -> int:
    """Record the verdict, then print the finding judged again."""
    from analyzer.cases.verdicts import finding_events, judge_event, review_events, stored_fields

    link = _link(store, args.complaint, args.link)
    client = influx_client(args)
    events = finding_events(client, link)
    onset = _onset(args.event, [e.onset_ns for e in events])
    number = judge_event(store, link, events, onset, args.verdict, args.reason, args.officer,
                         args.label)
    print(f"verdict #{number}: the event at {format_time(onset)} {args.verdict}")
    _say_rejudged(review_events(store, client, link, stored_fields(client, link), events))
    return 0
