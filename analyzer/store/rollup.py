"""One-minute rollups of the per-second measurements, kept by InfluxDB continuous queries, so a
wide plot reads 1,440 points a day instead of 86,400 (issue 33: a 31-day zoom over the raw
frames took 2.3 s alone, and eight at once grew InfluxDB from 0.46 to 3.2 GB).

- ``level_1m`` (tag ``device``): ``laeq_sum`` and ``frames`` (so a mean over any multiple of a
  minute is exact: sum(laeq_sum) / sum(frames), the plain mean of the frames' LAeq in dB, as
  the raw plot draws it) and ``lafmax_db`` (the maximum), per minute.
- ``rule_progress_1m`` (tag ``device``): ``episode_s`` and ``stretch_s``, their maxima.

Each continuous query recomputes the last ``RESAMPLE_FOR`` every minute, so frames that
arrive up to that late are counted; older late frames, and data stored before the queries
existed, need :func:`backfill` (the same SELECT ... INTO over a time range). Creating them
needs InfluxDB admin rights (docs/DEPLOY.md, "Security").
"""

from __future__ import annotations

from typing import Any, Protocol


class _DatabaseSettings(Protocol):
    @property
    def database(self) -> str: ...


class InfluxQueries(Protocol):
    """What the rollups need of :class:`analyzer.store.InfluxClient` (named structurally, so
    that ``influx`` may call :func:`create_rollups` without an import circle)."""

    @property
    def settings(self) -> _DatabaseSettings: ...

    def query(self, influxql: str, database: str | None = None) -> Any: ...

NS = 1_000_000_000
ROLLUP_S = 60
RESAMPLE_FOR = "2h"
BACKFILL_CHUNK_NS = 86400 * NS  # one day per SELECT ... INTO
LEVEL_ROLLUP = "level_1m"
PROGRESS_ROLLUP = "rule_progress_1m"
# name -> the SELECT ... INTO (without a time range or GROUP BY)
_SELECTS = {
    LEVEL_ROLLUP: "SELECT sum(laeq_db) AS laeq_sum, count(laeq_db) AS frames, "
                  f'max(lafmax_db) AS lafmax_db INTO "{LEVEL_ROLLUP}" FROM level',
    PROGRESS_ROLLUP: "SELECT max(episode_s) AS episode_s, max(stretch_s) AS stretch_s "
                     f'INTO "{PROGRESS_ROLLUP}" FROM rule_progress',
}
_GROUP = f"GROUP BY time({ROLLUP_S}s), *"


def continuous_queries(database: str) -> list[str]:
    """The ``CREATE CONTINUOUS QUERY`` statements (the same text again is accepted: idempotent)."""
    db = database.replace('"', '\\"')
    return [f'CREATE CONTINUOUS QUERY "{name}" ON "{db}" RESAMPLE EVERY {ROLLUP_S}s FOR '
            f"{RESAMPLE_FOR} BEGIN {select} {_GROUP} END" for name, select in _SELECTS.items()]


def create_rollups(client: InfluxQueries) -> None:
    """Create the continuous queries on the client's database (needs admin rights)."""
    for statement in continuous_queries(client.settings.database):
        client.query(statement, database="")


def backfill_statements(start_ns: int, end_ns: int) -> list[str]:
    """The ``SELECT ... INTO`` statements that compute the rollups over [start_ns, end_ns)
    (rounded out to whole minutes) as the continuous queries would have, a day per statement
    (each stays well inside InfluxDB's query-timeout: a device's day is 86,400 frames)."""
    step = ROLLUP_S * NS
    first, last = start_ns // step * step, -(-end_ns // step) * step
    statements = []
    for day_start in range(first, last, BACKFILL_CHUNK_NS):
        day_end = min(day_start + BACKFILL_CHUNK_NS, last)
        statements += [f"{select} WHERE time >= {day_start} AND time < {day_end} {_GROUP}"
                       for select in _SELECTS.values()]
    return statements


def backfill(client: InfluxQueries, start_ns: int, end_ns: int) -> None:
    """Compute the rollups over [start_ns, end_ns) now: for data stored before the continuous
    queries existed, or arriving later than RESAMPLE_FOR."""
    for statement in backfill_statements(start_ns, end_ns):
        client.query(statement)
