"""The review application's configuration takes only what it uses: InfluxDB is read, never
written, so the analyzer's write-side keys are neither listed nor accepted."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_idle_connections_are_closed_and_oversized_headers_refused(tmp_path: Path) -> None:
    port = _free_port()
    config = tmp_path / "review.toml"
    config.write_text(f'port = {port}\ncases_db = "{tmp_path / "cases.sqlite"}"\n'
                      "[limits]\nkeep_alive_s = 1\nmax_header_bytes = 4096\n")
    server = subprocess.Popen([BARKWATCH, "review", "--config", config],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # until it listens (bounded)
            try:
                idle = socket.create_connection(("127.0.0.1", port), timeout=1)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr
                time.sleep(0.2)
        with idle:
            idle.sendall(b"GET /signin HTTP/1.1\r\nHost: x\r\n\r\n")
            idle.settimeout(20)
            answer = b""
            while b"</html>" not in answer.lower():
                answer += idle.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            assert idle.recv(1) == b""  # the server closed the idle keep-alive connection
        with socket.create_connection(("127.0.0.1", port), timeout=20) as big:
            # Headers that never end (a slow client dribbling them): past the bound the
            # server stops buffering and refuses.
            big.sendall(b"GET /signin HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 8000)
            reply = big.recv(65536)
            assert reply.startswith(b"HTTP/1.1 400") or reply == b"", reply[:100]
    finally:
        server.terminate()
        server.wait(timeout=30)
