"""Page times of the review application for a case with a week of one device's data.

    nice -n 10 .venv/bin/python benchmarks/bench_review.py [--days 7] [--repeat 30]

A real InfluxDB (local, temporary) is filled as the live analyzer fills it
(tests/review_scene.py): one level point per second for DAYS days (604,800 for a week), and
each day 10 min of barking every 3 s at 20:00 (a continuous finding), 90 min of a bark every
45 s from 21:00 and 65 min of one every 30 s from 06:00 (intermittent findings), about 450
events a day, the rules' progress every 10 s and the sealed evidence windows. The complaint is
on the last day, its windows linked. ``barkwatch review`` runs as its own process (uvicorn, as
deployed); this process signs in over HTTP and asks each page REPEAT times in turn after two
warm-up rounds, and prints p50, p95 and the maximum wall time per page (request sent to body
read). With --reuse-s 0 every case and finding page recomputes its links' windows from the
stored events (as ``barkwatch case show``); by default a check is reused for 60 s. The
evidence report (HTML with matplotlib plots, and its PDF) is timed apart: a download, not a
page.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analyzer.cases import CaseFile, add_account  # noqa: E402
from analyzer.deploy.services import Services  # noqa: E402
from analyzer.review import hash_password  # noqa: E402
from analyzer.store import InfluxClient, InfluxSettings  # noqa: E402
from tests.review_scene import NS, T0, file_case, store_evidence  # noqa: E402

PASSWORD = "bench password 1"


def week_of_barks(days: int) -> list[int]:
    """Bark onsets (s from T0, which is 20:00 Chicago) for ``days`` days."""
    barks: set[int] = set()
    for day in range(days):
        d = day * 86400
        barks.update(d + t for t in range(0, 601, 3))  # 20:00-20:10, continuous
        barks.update(d + t for t in range(3600, 3600 + 5401, 45))  # 21:00-22:30
        if day < days - 1:
            barks.update(d + t for t in range(36000, 36000 + 3901, 30))  # 06:00-07:05
    return sorted(barks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"barkwatch review exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("barkwatch review did not start listening")


def sign_in(base: str) -> urllib.request.OpenerDirector:
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = opener.open(base + "/signin").read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token, "no CSRF token on the sign-in page"
    form = {"csrf_token": token.group(1), "username": "bench", "password": PASSWORD,
            "next": "/cases"}
    answer = opener.open(base + "/signin", urllib.parse.urlencode(form).encode())
    assert answer.url.endswith("/cases"), f"sign-in failed: {answer.url}"
    return opener


def nearest_rank(ordered: list[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (a value that was measured)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def timed(opener: urllib.request.OpenerDirector, url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with opener.open(url) as response:
        body = response.read()
    return (time.perf_counter() - start) * 1000.0, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7, help="days of data (default 7)")
    parser.add_argument("--repeat", type=int, default=30, help="requests per page (30)")
    parser.add_argument("--report-repeat", type=int, default=3,
                        help="requests of the report HTML and PDF (3)")
    parser.add_argument("--reuse-s", type=float, default=60.0,
                        help="the server's verification_reuse_s (default 60; 0 recomputes "
                        "every link on every view)")
    args = parser.parse_args()
    seconds = args.days * 86400
    with tempfile.TemporaryDirectory() as tmp, Services(Path(tmp) / "services") as services:
        client = InfluxClient(InfluxSettings(url=services.influx.url))
        client.create_database()
        barks = week_of_barks(args.days)
        start = time.perf_counter()
        windows = store_evidence(client, barks, seconds)
        fill_s = time.perf_counter() - start
        levels = client.query("SELECT count(laeq_db) FROM level")[0]["values"][0][1]
        events = client.query("SELECT count(duration_s) FROM dog_event")[0]["values"][0][1]
        print(f"InfluxDB: {levels} level points, {events} dog events, {windows} evidence "
              f"windows ({fill_s:.0f} s to store)")
        case = file_case(Path(tmp) / "cases.sqlite", client, day=args.days - 1,
                         span_end_s=9000, removed_s=seconds)
        with CaseFile(case.db) as store:
            add_account(store, "bench", "Ofc. Bench", hash_password(PASSWORD), "bench")
            links = store.links(case.complaint)
        port = free_port()
        config = Path(tmp) / "review.toml"
        config.write_text(f'port = {port}\ncases_db = "{case.db}"\n'
                          f'max_failures_per_address = 1000\n'
                          f'verification_reuse_s = {args.reuse_s}\n'
                          f'[influx]\nurl = "{services.influx.url}"\n', encoding="utf-8")
        server = subprocess.Popen([str(ROOT / ".venv" / "bin" / "barkwatch"), "--log-level",
                                   "WARNING", "review", "--config", str(config)],
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            wait_for_port(port, server, 60.0)
            base = f"http://127.0.0.1:{port}"
            opener = sign_in(base)
            c = case.complaint
            week_from, week_to = T0 // 1_000_000, (T0 + seconds * NS) // 1_000_000
            pages = {"cases": "/cases", "case": f"/cases/{c}",
                     "devices": f"/addresses/{case.address}/devices"}
            for link in links:
                pages[f"finding ({link.rule})"] = f"/cases/{c}/findings/{link.id}"
                pages[f"plot data ({link.rule})"] = f"/cases/{c}/findings/{link.id}/data"
            first = links[0]
            pages["plot data, whole week"] = (f"/cases/{c}/findings/{first.id}/data?"
                                              f"from={week_from}&to={week_to}")
            mid = first.start_ns // 1_000_000
            pages["plot data, 2 min"] = (f"/cases/{c}/findings/{first.id}/data?from={mid}"
                                         f"&to={mid + 120_000}")
            times: dict[str, list[float]] = {name: [] for name in pages}
            sizes: dict[str, int] = {}
            for round_ in range(args.repeat + 2):
                for name, path in pages.items():
                    ms, size = timed(opener, base + path)
                    sizes[name] = size
                    if round_ >= 2:  # two warm-up rounds
                        times[name].append(ms)
            print(f"\n{len(links)} linked windows; {args.repeat} requests per page after 2 "
                  "warm-up rounds, one client, server as its own process; links' checks "
                  f"reused for {args.reuse_s:g} s")
            print(f"{'page':28} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'bytes':>9}")
            everything: list[float] = []
            for name, values in times.items():
                values.sort()
                everything.extend(values)
                p95 = nearest_rank(values, 0.95)
                print(f"{name:28} {statistics.median(values):8.0f} {p95:8.0f} "
                      f"{values[-1]:8.0f} {sizes[name]:9d}")
            everything.sort()
            print(f"{'all pages':28} {statistics.median(everything):8.0f} "
                  f"{nearest_rank(everything, 0.95):8.0f} {everything[-1]:8.0f}")
            for name in ("report.html", "report.pdf"):
                runs = [timed(opener, f"{base}/cases/{c}/{name}")[0]
                        for _ in range(args.report_repeat)]
                print(f"{name:28} {statistics.median(runs):8.0f} ms median of "
                      f"{args.report_repeat} (first {runs[0]:.0f} ms)")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
