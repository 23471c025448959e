"""docs/DEPLOY.md's InfluxDB set-up, run against a real InfluxDB 1.x with authentication on:
an admin, the database, the analyzer's user with rights on that database only, and Grafana's
read-only user. The statements are the ones the document gives."""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.deploy.services import InfluxDB
from analyzer.store import InfluxClient, InfluxSettings
from analyzer.store.influx import InfluxUnavailable

PASSWORDS = {"admin": "admin-secret", "barkwatch": "analyzer-secret", "review": "review-secret",
             "grafana": "grafana-secret"}
SETUP = [  # (who runs it, statement), in the document's order
    (None, "CREATE USER admin WITH PASSWORD 'admin-secret' WITH ALL PRIVILEGES"),
    ("admin", "CREATE DATABASE barkwatch"),
    ("admin", "CREATE USER barkwatch WITH PASSWORD 'analyzer-secret'"),
    ("admin", "GRANT ALL ON barkwatch TO barkwatch"),
    ("admin", "CREATE USER review WITH PASSWORD 'review-secret'"),
    ("admin", "GRANT READ ON barkwatch TO review"),
    ("admin", "CREATE USER grafana WITH PASSWORD 'grafana-secret'"),
    ("admin", "GRANT READ ON barkwatch TO grafana"),
]


def _post(url: str, user: str | None, statement: str, database: str = "") -> str:
    form = {"q": statement, "db": database} if database else {"q": statement}
    request = urllib.request.Request(
        f"{url}/query", data=urllib.parse.urlencode(form).encode(), method="POST"
    )
    if user is not None:
        token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


@pytest.fixture
def influx(tmp_path: Path) -> Iterator[InfluxDB]:
    """InfluxDB with authentication on, set up as docs/DEPLOY.md says."""
    server = InfluxDB(tmp_path / "influxdb", auth=True)
    server.start()
    try:
        for user, statement in SETUP:
            assert '"error"' not in _post(server.url, user, statement), statement
        yield server
    finally:
        server.stop()


def _client(influx: InfluxDB, user: str, monkeypatch: pytest.MonkeyPatch) -> InfluxClient:
    monkeypatch.setenv("BARKWATCH_INFLUX_PASSWORD", PASSWORDS[user])
    return InfluxClient(InfluxSettings(url=influx.url, username=user))


def test_the_analyzers_user_without_admin_rights_starts_on_the_database_made_for_it(
    influx: InfluxDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    analyzer = _client(influx, "barkwatch", monkeypatch)
    analyzer.create_database()  # exists: nothing to create, no admin right needed
    analyzer.query("SELECT * FROM level")  # may read its database
    with pytest.raises(InfluxUnavailable, match="requires admin privilege"):
        analyzer.query('CREATE DATABASE "other"', database="")


@pytest.mark.parametrize("user", ["grafana", "review"])
def test_the_read_only_users_read_but_cannot_write(influx: InfluxDB, user: str) -> None:
    assert '"error"' not in _post(influx.url, user, "SELECT * FROM level", "barkwatch")
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    write = urllib.request.Request(
        f"{influx.url}/write?db=barkwatch", data=b"level,device=x laeq_db=50 1", method="POST",
        headers={"Authorization": "Basic " + token},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(write, timeout=10)
    assert refused.value.code == 403


def test_nobody_gets_in_without_a_password(influx: InfluxDB) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(influx.url, None, "SELECT * FROM level", "barkwatch")
    assert refused.value.code == 401
