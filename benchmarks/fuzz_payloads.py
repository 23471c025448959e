"""Hostile frame payloads through the analyzer's decode-and-validate function (issue 23 item 2).

    .venv/bin/python benchmarks/fuzz_payloads.py [--count 100000] [--seed 23] [--time-limit 900]

Payloads are drawn by hypothesis strategies: real frames, made by the sensor's own code
(``sensor.frames``) from generated sound and varied field by field (every field of
``sensor.wire.Frame``, by its type), are encoded by the wire encoder and then corrupted: a
field replaced by a value of another type, NaN, infinity, a huge number or a deeply nested
container; fields dropped or added; an array truncated, lengthened past the payload limit or
holding NaN; the bytes truncated, bit-flipped or spliced; msgpack bombs; random bytes. The
strategies read the field names from the encoded frame, so they follow the wire format's
changes.

Each payload goes through :func:`analyzer.ingest.frame_check.check_frame`, the function the
MQTT handler calls. Reported: crashes (an exception out of it, or a payload taking more than
``--hang-s`` of CPU time; must be 0), rejections counted by reason, the slowest payload by the
thread's CPU time (wall time too, which on a loaded machine includes waiting for a core), peak
RSS growth (ru_maxrss after the run minus before the first payload: hypothesis's own
bookkeeping included), and a leak check: resident memory before and after every bomb at its
largest size is decoded ``--leak-rounds`` times more. Exit status 1 when anything crashed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import heapq
import logging
import resource
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from types import FrameType
from typing import Any

import msgpack
import numpy as np
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from analyzer.ingest.frame_check import REJECTION_REASONS, Rejection, check_frame
from analyzer.ingest.service import FRAME_SHAPE
from sensor.errors import WireError
from sensor.frames import frames_from_samples
from sensor.wire import GATE_DOG, MAX_PAYLOAD_BYTES, Frame, encode_frame

log = logging.getLogger("fuzz_payloads")

DEVICE = "fuzz-dev"
START_NS = 1_796_000_000_000_000_000  # 2026-11-30: any time will do, plausibility is not run
FULL_SCALE_DB = 120.0


# --- valid frames, built by the sensor's own code ------------------------------------------
@cache
def real_frames() -> tuple[Frame, ...]:
    """Frames of a tone, noise, a chirp and silence at 16 and 48 kHz, from ``sensor.frames``."""
    rng = np.random.default_rng(0)
    frames: list[Frame] = []
    for rate in (16000, 48000):
        t = np.arange(2 * rate) / rate
        signals = (
            0.1 * np.sin(2 * np.pi * 500.0 * t),
            0.05 * rng.standard_normal(t.size),
            0.2 * np.sin(2 * np.pi * (200.0 + 1500.0 * t) * t),
            np.zeros(t.size),
        )
        for samples in signals:
            built = frames_from_samples(samples, rate, FULL_SCALE_DB, DEVICE, START_NS)
            # no dog in these: sent as levels; the tone's also as dog frames, every field there
            frames.extend(built if samples is not signals[0] else [
                dataclasses.replace(f, gate=GATE_DOG) for f in built])
    return tuple(frames)


def _varied(rng: np.random.Generator, value: Any, annotation: str) -> Any:
    """``value`` varied a little, keeping its type: levels by up to 3 dB, arrays value by
    value, integers (sequence numbers, times) anywhere in their range."""
    if annotation == "bool":
        return bool(rng.integers(2))
    if annotation == "int":
        return value if rng.integers(2) else int(rng.integers(0, 2**63 - 1))
    if annotation == "float":
        return value + float(rng.uniform(-3.0, 3.0))
    if annotation.startswith("np.ndarray"):
        array = np.asarray(value, dtype=np.float32)
        return array + rng.uniform(-3.0, 3.0, array.shape).astype(np.float32)
    return value


@cache
def valid_pool(size: int = 400) -> tuple[bytes, ...]:
    """Real frames varied field by field (up to four fields each, chosen from every field of
    ``sensor.wire.Frame`` and varied by its declared type) and encoded by the wire encoder;
    the unvaried frame where the encoder refuses the variation. Built once (seeded), so that
    each payload costs the fuzzer a draw, not an encoding."""
    rng = np.random.default_rng(23)
    frames = real_frames()
    specs = dataclasses.fields(Frame)
    pool = []
    for i in range(size):
        frame = frames[i % len(frames)]
        chosen = rng.choice(len(specs), size=int(rng.integers(0, 5)), replace=False)
        changes = {specs[k].name: _varied(rng, getattr(frame, specs[k].name), str(specs[k].type))
                   for k in chosen}
        try:
            pool.append(encode_frame(dataclasses.replace(frame, **changes)))
        except (WireError, ValueError, TypeError, OverflowError):
            pool.append(encode_frame(frame))
    return tuple(pool)


def valid_payloads() -> st.SearchStrategy[bytes]:
    """One of :func:`valid_pool`'s frames."""
    return st.deferred(lambda: st.sampled_from(valid_pool()))


# --- corruption ------------------------------------------------------------------------------
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=16)
SCALARS = st.one_of(
    st.none(), st.booleans(), TEXT, st.binary(max_size=32),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 1e308, -1e308, 5e-324,
                     float("nan"), float("inf"), float("-inf"), -0.0]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.binary(max_size=8)), inner, max_size=4),
    ),
    max_leaves=10,
)
NAN_F32_AND_F16 = b"\x00\x00\xc0\x7f"  # NaN as float32, and (0, NaN) as two float16
INF_F32 = b"\x00\x00\x80\x7f"


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def array_corruptions(draw: st.DrawFn, raw: bytes) -> bytes:
    """One of a packed array's faults: truncated, odd length, huge, NaN or inf inside."""
    kind = draw(st.sampled_from(["cut", "odd", "huge", "nan", "inf", "empty", "doubled"]))
    if kind == "cut":
        return raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    if kind == "odd":
        return raw + b"\x00"
    if kind == "huge":
        return draw(st.sampled_from([b"\x00\x3c", b"\xff\x7f\x00\x00", b"\x00"])) * draw(
            st.integers(1, 40_000))
    if kind == "empty":
        return b""
    if kind == "doubled":
        return raw + raw
    at = 4 * draw(st.integers(0, max(len(raw) // 4 - 1, 0)))
    return raw[:at] + (NAN_F32_AND_F16 if kind == "nan" else INF_F32) + raw[at + 4:]


@st.composite
def field_corruptions(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid payload with its fields changed at the map level, packed again."""
    payload: dict[Any, Any] = msgpack.unpackb(draw(valid_payloads()), raw=False)
    keys = sorted(payload)
    kind = draw(st.sampled_from(
        ["wrong_value", "drop", "extra_key", "array", "nest", "non_finite", "bin_as_str"]))
    if kind == "wrong_value":
        for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3)):
            payload[key] = draw(VALUES)
    elif kind == "drop":
        for key in draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3)):
            payload.pop(key, None)
    elif kind == "extra_key":
        payload[draw(st.one_of(TEXT, st.binary(max_size=8)))] = draw(VALUES)
    elif kind == "array":
        arrays = [key for key in keys if isinstance(payload[key], bytes)]
        if arrays:  # a "levels" frame (wire v4) without background statistics has none
            key = draw(st.sampled_from(arrays))
            payload[key] = draw(array_corruptions(payload[key]))
    elif kind == "nest":
        payload[draw(st.sampled_from(keys))] = _nested(draw(st.integers(1, 400)), 1)
    elif kind == "non_finite":
        numbers = [key for key in keys if isinstance(payload[key], float)]
        payload[draw(st.sampled_from(numbers))] = draw(
            st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308]))
    # bin_as_str: packed without the bin type, so every array arrives as (invalid) text
    return f"field:{kind}", msgpack.packb(payload, use_bin_type=kind != "bin_as_str")


@st.composite
def byte_corruptions(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid payload's bytes truncated, bit-flipped, spliced or padded."""
    data = bytearray(draw(valid_payloads()))
    kind = draw(st.sampled_from(["truncate", "bit_flips", "splice", "append", "prepend"]))
    if kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)):]
    elif kind == "bit_flips":
        for _ in range(draw(st.integers(1, 16))):
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif kind == "splice":
        at = draw(st.integers(0, len(data)))
        data[at:at + draw(st.integers(0, 16))] = draw(st.binary(min_size=1, max_size=64))
    elif kind == "append":
        data += draw(st.binary(min_size=1, max_size=64))
    else:
        data[:0] = draw(st.binary(min_size=1, max_size=8))
    return f"bytes:{kind}", bytes(data)


def _bombs() -> list[tuple[str, Callable[[int], bytes]]]:
    """msgpack that claims or nests far more than it holds; each scaled by ``n``."""
    return [
        ("nested_arrays", lambda n: b"\x91" * n + b"\xc0"),
        ("nested_maps", lambda n: b"\x81\xa1k" * n + b"\xc0"),
        ("array_claims_4g", lambda n: b"\xdd\xff\xff\xff\xff" + b"\xc0" * (n % 1000)),
        ("map_claims_4g", lambda n: b"\xdf\xff\xff\xff\xff" + b"\xa1k\xc0" * (n % 1000)),
        ("str_claims_4g", lambda n: b"\xdb\xff\xff\xff\xff" + b"a" * (n % 1000)),
        ("bin_claims_4g", lambda n: b"\xc6\xff\xff\xff\xff" + b"a" * (n % 1000)),
        ("ext_claims_4g", lambda n: b"\xc9\xff\xff\xff\xff\x01" + b"a" * (n % 1000)),
        ("many_empty_arrays", lambda n: b"\xdd" + min(n, 65_000).to_bytes(4, "big")
         + b"\x90" * min(n, 65_000)),
        ("many_keys", lambda n: b"\xdf" + min(n, 6000).to_bytes(4, "big") + b"".join(
            b"\xa5" + f"{i:05d}".encode() + b"\xc0" for i in range(min(n, 6000)))),
        ("huge_payload", lambda n: b"\xc6" + (70_000 + n).to_bytes(4, "big") + b"\x00" * (70_000
                                                                                         + n)),
    ]


BOMBS = _bombs()


@st.composite
def bombs(draw: st.DrawFn) -> tuple[str, bytes]:
    """A msgpack bomb from BOMBS at a drawn size."""
    name, make = draw(st.sampled_from(BOMBS))
    return f"bomb:{name}", make(draw(st.integers(1, 65_000)))


@cache
def hostile_payloads() -> st.SearchStrategy[tuple[str, bytes]]:
    """(kind, payload): every kind of corruption above, valid frames and random bytes."""
    return st.one_of(
        field_corruptions(),
        byte_corruptions(),
        bombs(),
        valid_payloads().map(lambda data: ("valid", data)),
        st.binary(max_size=2000).map(lambda data: ("random", data)),
    )


# --- the run ---------------------------------------------------------------------------------
class Hang(BaseException):
    """A payload took longer than the hang limit (raised by the interval timer)."""


class Done(BaseException):
    """Enough payloads, or the time limit passed: ends the hypothesis loop (a BaseException
    passes through hypothesis, which would take an Exception for a failing example)."""


BATCH = 20
SLOWEST_KEPT = 10


@dataclass
class FuzzReport:
    """What a fuzz run saw."""

    payloads: int = 0
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    unnamed_rejections: list[str] = field(default_factory=list)  # reason not a known code
    slowest_cpu_s: float = 0.0
    slowest_cpu: str = ""
    slowest_wall_s: float = 0.0
    slowest_wall: str = ""
    # The SLOWEST_KEPT payloads that took the most CPU, as (CPU s, kind, payload): re-timed
    # alone afterwards, since a full garbage collection of the fuzzer's own (hypothesis's)
    # heap can land on any payload and is charged to it.
    slowest_kept: list[tuple[float, str, bytes]] = field(default_factory=list)
    rss_growth_kib: int = 0
    elapsed_s: float = 0.0
    stopped_by_time: bool = False


def _judge(report: FuzzReport, kind: str, data: bytes, hang_s: float) -> None:
    started, started_cpu = time.perf_counter(), time.thread_time()
    signal.setitimer(signal.ITIMER_PROF, hang_s)  # CPU time: waiting for a core is no hang
    try:
        outcome = check_frame(DEVICE, data, MAX_PAYLOAD_BYTES, FRAME_SHAPE)
    except Hang:
        report.crashes.append(f"{kind} ({len(data)} bytes): no answer within {hang_s} s CPU")
        return
    except Exception as exc:  # the finding this tool exists for
        report.crashes.append(f"{kind} ({len(data)} bytes): {type(exc).__name__}: {exc}"[:300])
        return
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    spent, spent_cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    if spent_cpu > report.slowest_cpu_s:
        report.slowest_cpu_s, report.slowest_cpu = spent_cpu, f"{kind}, {len(data)} bytes"
    kept = report.slowest_kept
    if len(kept) < SLOWEST_KEPT or spent_cpu > kept[0][0]:
        heapq.heappush(kept, (spent_cpu, kind, data))
        if len(kept) > SLOWEST_KEPT:
            heapq.heappop(kept)
    if spent > report.slowest_wall_s:
        report.slowest_wall_s, report.slowest_wall = spent, f"{kind}, {len(data)} bytes"
    if isinstance(outcome, Rejection):
        report.rejected[outcome.reason] += 1
        if (outcome.reason not in REJECTION_REASONS or outcome.reason == "unspecified"
                or not outcome.message):
            report.unnamed_rejections.append(f"{kind}: {outcome.reason!r} {outcome.message!r}")
    else:
        report.accepted += 1


def fuzz(count: int, seed_value: int, time_limit_s: float, hang_s: float = 5.0,
         progress: Callable[[FuzzReport], None] | None = None) -> FuzzReport:
    """Send up to ``count`` hostile payloads (fewer if ``time_limit_s`` passes first)."""
    report = FuzzReport()
    valid_pool()  # built before the clock and the memory baseline start

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise Hang

    previous = signal.signal(signal.SIGPROF, on_alarm)
    started = time.monotonic()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    # BATCH payloads per hypothesis example: its per-example bookkeeping (saving and restoring
    # every random generator's state) cost more than a payload's drawing and decoding.
    @seed(seed_value)
    @settings(max_examples=-(-count // BATCH) * 2, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(hostile_payloads(), min_size=BATCH, max_size=BATCH))
    def one(batch: list[tuple[str, bytes]]) -> None:
        for kind, payload in batch:
            if report.payloads >= count:
                raise Done
            if time.monotonic() - started > time_limit_s:
                report.stopped_by_time = True
                raise Done
            report.payloads += 1
            report.kinds[kind.split(":")[0]] += 1
            _judge(report, kind, payload, hang_s)
            if progress is not None and report.payloads % 10_000 == 0:
                progress(report)

    try:
        one()
    except Done:
        pass
    finally:
        signal.signal(signal.SIGPROF, previous)
    report.elapsed_s = time.monotonic() - started
    report.rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    return report


def retimed(report: FuzzReport, runs: int = 5) -> list[tuple[float, float, str, int]]:
    """(CPU s in the run, median CPU s alone after a full collection, kind, bytes) of the
    slowest payloads kept, slowest alone first."""
    rows = []
    for spent, kind, data in report.slowest_kept:
        gc.collect()
        times = []
        for _ in range(runs):
            started = time.thread_time()
            check_frame(DEVICE, data, MAX_PAYLOAD_BYTES, FRAME_SHAPE)
            times.append(time.thread_time() - started)
        rows.append((spent, sorted(times)[runs // 2], kind, len(data)))
    return sorted(rows, key=lambda row: -row[1])


def resident_kib() -> int:
    """Resident memory now (not the peak), KiB."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() // 1024


def leak_check(rounds: int) -> tuple[int, int, int]:
    """(resident KiB before, after, payloads): every bomb at its largest size that fits the
    payload limit, and one of each corruption kind of the pool's first frame, decoded
    ``rounds`` times."""
    payloads = [make(MAX_PAYLOAD_BYTES)[:MAX_PAYLOAD_BYTES] for _, make in BOMBS]
    payloads.append(valid_pool()[0])
    for payload in payloads * 3:  # warm: first-time allocations are no leak
        check_frame(DEVICE, payload, MAX_PAYLOAD_BYTES, FRAME_SHAPE)
    before = resident_kib()
    for _ in range(rounds):
        for payload in payloads:
            check_frame(DEVICE, payload, MAX_PAYLOAD_BYTES, FRAME_SHAPE)
    return before, resident_kib(), rounds * len(payloads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000, help="payloads to send")
    parser.add_argument("--seed", type=int, default=23, help="hypothesis seed (reproducible)")
    parser.add_argument("--time-limit", type=float, default=900.0,
                        help="stop after this many seconds even if --count is not reached")
    parser.add_argument("--hang-s", type=float, default=5.0,
                        help="a payload taking more CPU seconds than this counts as a crash")
    parser.add_argument("--leak-rounds", type=int, default=2000,
                        help="rounds of the leak check after the run (0: none)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.time_limit <= 0 or args.hang_s <= 0 or args.leak_rounds < 0:
        parser.error("--count, --time-limit and --hang-s must be positive")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report = fuzz(args.count, args.seed, args.time_limit, args.hang_s,
                  progress=lambda r: log.info("%d payloads, %d crashes", r.payloads,
                                              len(r.crashes)))
    log.info("payloads: %d in %.1f s%s (seed %d)", report.payloads, report.elapsed_s,
             ", stopped by --time-limit" if report.stopped_by_time else "", args.seed)
    log.info("by kind: %s", ", ".join(f"{k} {n}" for k, n in sorted(report.kinds.items())))
    log.info("accepted: %d", report.accepted)
    log.info("rejected by reason: %s",
             ", ".join(f"{k} {n}" for k, n in report.rejected.most_common()))
    log.info("crashes: %d", len(report.crashes))
    for crash in report.crashes[:20]:
        log.info("  %s", crash)
    log.info("rejections without a known reason: %d", len(report.unnamed_rejections))
    for line in report.unnamed_rejections[:20]:
        log.info("  %s", line)
    log.info("slowest payload: %.2f ms CPU (%s); by wall time %.2f ms (%s)",
             report.slowest_cpu_s * 1000, report.slowest_cpu, report.slowest_wall_s * 1000,
             report.slowest_wall)
    for spent, alone, kind, size in retimed(report)[:5]:
        log.info("  re-timed alone: %.2f ms CPU (%.2f ms in the run): %s, %d bytes",
                 alone * 1000, spent * 1000, kind, size)
    valid_times = []
    for payload in valid_pool()[:100]:
        started = time.thread_time()
        check_frame(DEVICE, payload, MAX_PAYLOAD_BYTES, FRAME_SHAPE)
        valid_times.append(time.thread_time() - started)
    log.info("  for comparison, a valid frame: median %.2f ms CPU (100 of the pool's)",
             sorted(valid_times)[50] * 1000)
    log.info("peak RSS growth: %.1f MiB", report.rss_growth_kib / 1024)
    if args.leak_rounds > 0:
        before, after, payloads = leak_check(args.leak_rounds)
        log.info("leak check: resident %.1f MiB before and %.1f MiB after %d more payloads "
                 "(bombs at the size limit and a valid frame)", before / 1024, after / 1024,
                 payloads)
    return 1 if report.crashes or report.unnamed_rejections else 0


if __name__ == "__main__":
    sys.exit(main())
