"""Times in the city's zone (America/Chicago) with UTC beside them; stored as epoch ns (UTC).

Issue 21: an officer reads and types local times; the records and InfluxDB hold UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from analyzer.errors import AnalyzerError

CITY_ZONE = ZoneInfo("America/Chicago")  # Glencoe, Minnesota
NS = 1_000_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TimeInputError(AnalyzerError):
    """A time an officer typed cannot be read."""


def parse_local_time(text: str, where: str = "time") -> int:
    """Epoch ns of ``text``: ISO 8601; without a zone it is America/Chicago local time
    (``2026-06-01 21:05``), with one (``Z``, ``+00:00``) it is taken as written. A local time
    that a daylight-saving change skips or repeats is refused: add the offset."""
    stripped = text.strip()
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TimeInputError(f"{where}: {text!r} is not an ISO 8601 time such as "
                             "'2026-06-01 21:05' (Chicago) or '2026-06-02T02:05Z'") from exc
    if moment.tzinfo is None:
        local = moment.replace(tzinfo=CITY_ZONE)
        # zoneinfo resolves gaps and folds silently; the two readings differ exactly there.
        other = moment.replace(tzinfo=CITY_ZONE, fold=1)
        if local.utcoffset() != other.utcoffset():
            raise TimeInputError(f"{where}: {text!r} is ambiguous or does not exist in "
                                 "America/Chicago (daylight-saving change); add the UTC offset")
        moment = local
    return (moment - EPOCH) // timedelta(microseconds=1) * 1000


def format_time(ns: int, seconds: bool = True) -> str:
    """``2026-06-01 21:05:00 CDT (2026-06-02 02:05:00 UTC)``."""
    pattern = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    moment = datetime.fromtimestamp(ns / NS, tz=UTC)
    local = moment.astimezone(CITY_ZONE)
    return f"{local.strftime(pattern)} {local.tzname()} ({moment.strftime(pattern)} UTC)"


def local_date(ns: int) -> str:
    """The calendar date in America/Chicago (subd. 5 cond. 3 counts prior *dates* there)."""
    return datetime.fromtimestamp(ns / NS, tz=UTC).astimezone(CITY_ZONE).date().isoformat()
