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

With --hostile the page table is replaced by issue 33's attacks, each for --load-s while the
officer asks the cases, case, finding and plot data pages in turn (p95 of those is what
matters): ``abandoned-pdf`` (42 clients asking for the PDF and hanging up after 0.3 s, again
and again), ``zoom-8`` / ``zoom-16`` (that many at a time asking for the whole range, another
officer's account), ``signin-flood`` (4 clients sending wrong passwords for the officer's
account: measurement only), ``none`` (the officer alone, for comparison). InfluxDB's
resident memory is sampled after each page.

    nice -n 10 .venv/bin/python benchmarks/bench_review.py --days 31 \
        --hostile none,abandoned-pdf,zoom-8,zoom-16,signin-flood --load-s 20
"""

from __future__ import annotations

import argparse
import http.cookiejar
import math
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analyzer.cases import CaseFile, add_account  # noqa: E402
from analyzer.deploy.services import InfluxDB, Services  # noqa: E402
from analyzer.review import hash_password  # noqa: E402
from analyzer.store import InfluxClient, InfluxSettings  # noqa: E402
from analyzer.store.rollup import backfill  # noqa: E402
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


def sign_in(base: str, username: str = "bench") -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.jar = jar  # type: ignore[attr-defined]  # the hostile loads copy the cookie
    page = opener.open(base + "/signin").read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token, "no CSRF token on the sign-in page"
    form = {"csrf_token": token.group(1), "username": username, "password": PASSWORD,
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


HOSTILE_LOADS = ("none", "abandoned-pdf", "zoom-8", "zoom-16", "signin-flood")
ABANDONED_CLIENTS = 42  # as issue 33's probe: 42 PDF requests, each given up


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def abandon_pdf(base: str, path: str, cookie: str, stop: threading.Event) -> int:
    """Ask for the PDF and hang up after 0.3 s, again and again; returns how many."""
    host, port = base.removeprefix("http://").split(":")
    count = 0
    for _ in range(100_000):
        if stop.is_set():
            break
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n"
                         .encode())
            stop.wait(0.3)
        count += 1
    return count


def zoom_out(opener: urllib.request.OpenerDirector, url: str, stop: threading.Event,
             statuses: list[int]) -> None:
    """The widest plot, again and again (each answer's status kept)."""
    for _ in range(100_000):
        if stop.is_set():
            break
        try:
            with opener.open(url, timeout=30) as response:
                response.read()
                statuses.append(response.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
        except OSError:
            statuses.append(0)


def flood_sign_in(base: str, stop: threading.Event, statuses: list[int]) -> None:
    """Wrong passwords for the officer's account as fast as the server answers."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    for _ in range(100_000):
        if stop.is_set():
            break
        try:
            page = opener.open(base + "/signin", timeout=30).read().decode()
            token = re.search(r'name="csrf_token" value="([^"]+)"', page)
            form = {"csrf_token": token.group(1) if token else "", "username": "bench",
                    "password": "wrong password", "next": "/cases"}
            opener.open(base + "/signin", urllib.parse.urlencode(form).encode(), timeout=30)
            statuses.append(200)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
        except OSError:
            statuses.append(0)


def attack(load: str, base: str, zoom: str, pdf: str, load_s: float,
           answer: Connection) -> None:
    """The attacker, in a process of its own (its threads never hold the officer client's
    GIL): ``load`` for ``load_s``; sends back the statuses it was answered."""
    stop, statuses = threading.Event(), []  # type: ignore[var-annotated]
    attacker = sign_in(base, "mallory") if load != "signin-flood" else None
    if load == "abandoned-pdf":
        cookie = "; ".join(f"{k.name}={k.value}" for k in attacker.jar)  # type: ignore[union-attr]
        threads = [threading.Thread(target=abandon_pdf, args=(base, pdf, cookie, stop))
                   for _ in range(ABANDONED_CLIENTS)]
    elif load.startswith("zoom-"):
        threads = [threading.Thread(target=zoom_out, args=(attacker, base + zoom, stop,
                                                           statuses))
                   for _ in range(int(load.split("-")[1]))]
    elif load == "signin-flood":
        threads = [threading.Thread(target=flood_sign_in, args=(base, stop, statuses))
                   for _ in range(4)]
    else:  # none: the officer alone, for comparison
        threads = []
    for thread in threads:
        thread.start()
    stop.wait(load_s)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    answer.send({code: statuses.count(code) for code in sorted(set(statuses))})


def run_hostile(load: str, base: str, officer: urllib.request.OpenerDirector,
                pages: dict[str, str], zoom: str, pdf: str, influx: InfluxDB,
                load_s: float) -> None:
    """Run one hostile load for ``load_s`` while the officer asks ``pages`` in turn; print
    their p50/p95/max, failures, and InfluxDB's resident memory before and at most."""
    if load not in HOSTILE_LOADS:
        raise SystemExit(f"--hostile: {load!r} is not one of {', '.join(HOSTILE_LOADS)}")
    assert influx.process is not None
    rss_before = rss_mb(influx.process.pid)
    rss_peak = rss_before
    times: list[float] = []
    failed = 0
    receiving, sending = multiprocessing.Pipe(duplex=False)
    attacker = multiprocessing.get_context("fork").Process(
        target=attack, args=(load, base, zoom, pdf, load_s, sending))
    attacker.start()
    time.sleep(1.0)  # the attacker signs in and starts
    deadline = time.monotonic() + load_s - 1.0
    try:
        for _ in range(100_000):
            if time.monotonic() > deadline:
                break
            for path in pages.values():
                try:
                    times.append(timed(officer, base + path)[0])
                except (urllib.error.HTTPError, OSError):
                    failed += 1
                rss_peak = max(rss_peak, rss_mb(influx.process.pid))
    finally:
        answered = receiving.recv() if receiving.poll(90) else "(none: attacker hung)"
        attacker.join(timeout=30)
        if attacker.is_alive():
            attacker.kill()
    time.sleep(2.0)
    rss_after = rss_mb(influx.process.pid)
    times.sort()
    print(f"{load:14} officer pages: {len(times)} answered, {failed} failed; p50 "
          f"{statistics.median(times) if times else float('nan'):.0f} ms, p95 "
          f"{nearest_rank(times, 0.95) if times else float('nan'):.0f} ms, max "
          f"{times[-1] if times else float('nan'):.0f} ms; InfluxDB RSS {rss_before:.0f} MB "
          f"before, {rss_peak:.0f} MB at most, {rss_after:.0f} MB 2 s after; attacker's "
          f"answers {answered or '(not counted)'}; load average {os.getloadavg()[0]:.1f}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7, help="days of data (default 7)")
    parser.add_argument("--repeat", type=int, default=30, help="requests per page (30)")
    parser.add_argument("--report-repeat", type=int, default=3,
                        help="requests of the report HTML and PDF (3)")
    parser.add_argument("--reuse-s", type=float, default=60.0,
                        help="the server's verification_reuse_s (default 60; 0 recomputes "
                        "every link on every view)")
    parser.add_argument("--hostile", default="",
                        help="comma-separated hostile loads to run instead of the page table: "
                        f"{', '.join(HOSTILE_LOADS)} (each for --load-s while a signed-in "
                        "officer asks the pages in turn)")
    parser.add_argument("--load-s", type=float, default=20.0,
                        help="seconds each hostile load runs (20)")
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
        start = time.perf_counter()
        backfill(client, T0, T0 + seconds * NS)  # the continuous queries see recent minutes only
        print(f"one-minute rollups backfilled in {time.perf_counter() - start:.1f} s")
        case = file_case(Path(tmp) / "cases.sqlite", client, day=args.days - 1,
                         span_end_s=9000, removed_s=seconds)
        with CaseFile(case.db) as store:
            add_account(store, "bench", "Ofc. Bench", hash_password(PASSWORD), "bench")
            add_account(store, "mallory", "Ofc. Mallory", hash_password(PASSWORD), "bench")
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
            if args.hostile:
                officer = {k: pages[k] for k in pages if "whole week" not in k
                           and "2 min" not in k}
                zoom = pages["plot data, whole week"]
                alone = sorted(timed(opener, base + zoom)[0] for _ in range(5))
                print(f"the whole range ({args.days} days) alone: "
                      f"{', '.join(f'{ms:.0f}' for ms in alone)} ms")
                for load in args.hostile.split(","):
                    run_hostile(load, base, opener, officer, zoom, f"/cases/{c}/report.pdf",
                                services.influx, args.load_s)
                return
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
