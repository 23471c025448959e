"""The review application's configuration takes only what it uses: InfluxDB is read, never
written, so the analyzer's write-side keys are neither listed nor accepted."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.review.settings import (
    INFLUX_WRITE_KEYS,
    ReviewConfigError,
    describe_review_settings,
    load_review_settings,
)

BARKWATCH = Path(sys.executable).parent / "barkwatch"


def test_describe_lists_the_database_keys_it_reads_and_none_it_would_write() -> None:
    keys = [line.split(" = ")[0] for line in describe_review_settings().splitlines()]
    assert {"influx.url", "influx.database", "influx.username", "influx.password_env",
            "influx.timeout_s"} <= set(keys)
    assert not [k for k in keys if k.removeprefix("influx.") in INFLUX_WRITE_KEYS]


@pytest.mark.parametrize("key, value", [("batch_points", "100"),
                                        ("refused_points_file", '"/tmp/refused.lp"')])
def test_a_write_side_key_is_refused_by_name(tmp_path: Path, key: str, value: str) -> None:
    config = tmp_path / "review.toml"
    config.write_text(f'[influx]\nurl = "http://127.0.0.1:8086"\n{key} = {value}\n')
    with pytest.raises(ReviewConfigError, match=f"config key 'influx.{key}' is the analyzer's"):
        load_review_settings(str(config))


def test_the_read_side_keys_load(tmp_path: Path) -> None:
    config = tmp_path / "review.toml"
    config.write_text('[influx]\nurl = "http://127.0.0.1:8086"\nusername = "review"\n'
                      "timeout_s = 5.0\n")
    settings = load_review_settings(str(config))
    assert (settings.influx.username, settings.influx.timeout_s) == ("review", 5.0)


def test_a_port_already_taken_is_named_and_never_announced_as_served(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    config = tmp_path / "review.toml"
    config.write_text(f'port = {port}\ncases_db = "{tmp_path / "cases.sqlite"}"\n')
    try:
        result = subprocess.run([BARKWATCH, "review", "--config", config], capture_output=True,
                                text=True, timeout=60)
    finally:
        taken.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (config keys 'host' and 'port')" in result.stderr
    assert "review application on" not in result.stderr + result.stdout
