"""Whose dog, simulated (issue 36's goals): the bearing of real barks from the corpus on two
boards' geometries, outdoors with a ground reflection and a facade, in the corpus's street
ambience at set SNRs.

Scene (pyroomacoustics' image-source method, max order 2, 48 kHz, air absorption): a 200 x
110 x 40 m box whose walls and ceiling absorb everything (open air) except the ground
(energy absorption 0.3, grass and paving) and one wall, the house's facade (0.1, brick and
glass), 3-5 m behind the sensor. The array hangs 2.5 m up, face up, its +x axis at a random
compass bearing. Dogs bark 0.5 m above the ground, 10-60 m away, anywhere in front of the
facade (bearings 100-260 degrees with the facade to the north). Background: 8 street
ambience recordings of ``dogs/`` (SONYC-UST v2, CC BY 4.0) played from 8 points 20-90 m
away in front of the facade, through the same room, plus each capsule's own self-noise
15 dB under the ambience. SNR: the bark's power at capsule 0 in the dog band (400-4000 Hz)
over its stretch, over the background's in the same band and stretch. Barks: ``dogs/``
clips labelled dog_bark, one per source (the large segmented source counts once), trimmed
to where the band envelope is within 20 dB of its peak, at most 2 s; each clip's source and
licence are written to the JSON.

1. Bearing error by SNR (0, 5, 10, 20 dB; -5 dB for information): median, 90th percentile,
   share of stretches with no bearing, and how often the error lies inside the reported
   uncertainty.
2. Two dogs 30, 45, 60 and 90 degrees apart: each bark's stretch is one event; "right dog"
   when its bearing is nearer its own dog's than the other's. The premises' sector is
   centred on dog A, half as wide as the separation (the widest sector that leaves dog B
   out): A's events counted from the premises / no bearing / elsewhere, and B's events that
   would count as from the premises (the goal: none).
3. Cost on one core at 48 kHz: CPU seconds per second of audio of :func:`estimate_bearing`
   on one-second stretches (the worst case: every second a dog stretch).

``--compare FIELD=VALUE ...`` runs parts 1-3 a second time with those :class:`DoaOptions`
fields changed, on the very same mixes (the draws do not depend on the estimate), and writes
its figures under each board's ``compare``: a change of the defaults measured on identical
stretches.

    .venv/bin/python benchmarks/bearing_sim.py --out docs/experiments/bearing_sim.json

Deterministic for a seed; a benchmark, not a test (a few minutes on one core).
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import csv  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyroomacoustics as pra  # noqa: E402
import scipy.signal  # noqa: E402
import soundfile as sf  # noqa: E402
import soxr  # noqa: E402

from analyzer.acoustics.attribution import (  # noqa: E402
    ELSEWHERE,
    NO_BEARING,
    PREMISES,
    PremisesSector,
    angle_offset_deg,
    classify_bearing,
)
from sensor.array import ArraySettings  # noqa: E402
from sensor.doa import (  # noqa: E402
    DOG_BAND_HZ,
    Bearing,
    DoaOptions,
    DoaPlan,
    estimate_bearing,
    plan_doa,
)

log = logging.getLogger("bearing_sim")
RATE = 48_000
CORPUS = ROOT.parent / "shared" / "corpus"
BOARDS = ("respeaker-4mic", "uma8")
BOARDS_KNOWN = ("respeaker-4mic", "respeaker-6mic", "uma8")
ROOM_M = (200.0, 110.0, 40.0)
GROUND_ABSORPTION = 0.3
FACADE_ABSORPTION = 0.1
ARRAY_HEIGHT_M = 2.5
DOG_HEIGHT_M = 0.5
SELF_NOISE_UNDER_AMBIENCE_DB = 15.0
SNRS_DB = (-5.0, 0.0, 5.0, 10.0, 20.0)
SEPARATIONS_DEG = (30.0, 45.0, 60.0, 90.0)


def read(path: Path) -> np.ndarray:
    samples, rate = sf.read(path, dtype="float64", always_2d=True)
    mono = samples.mean(axis=1)
    return mono if rate == RATE else soxr.resample(mono, rate, RATE, quality="VHQ")


def band(x: np.ndarray) -> np.ndarray:
    sos = scipy.signal.butter(4, DOG_BAND_HZ, btype="bandpass", fs=RATE, output="sos")
    return scipy.signal.sosfiltfilt(sos, x, axis=0)


def trim_to_barks(clip: np.ndarray, max_s: float = 2.0) -> np.ndarray:
    """From the first to the last 10 ms where the band envelope is within 20 dB of its peak."""
    hop = RATE // 100
    energy = np.add.reduceat(band(clip) ** 2, np.arange(0, clip.size, hop))
    loud = np.flatnonzero(energy >= energy.max() * 0.01)
    start, end = loud[0] * hop, min(clip.size, (loud[-1] + 1) * hop)
    return clip[start:min(end, start + int(max_s * RATE))]


@dataclass(frozen=True)
class Clip:
    clip_id: str
    source: str
    licence: str
    samples: np.ndarray


def bark_clips(limit: int, rng: np.random.Generator) -> list[Clip]:
    with open(CORPUS / "dogs" / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] == "dog_bark"]
    by_source: dict[str, dict[str, str]] = {}
    for row in sorted(rows, key=lambda r: r["clip_id"]):
        if 0.3 <= float(row["duration_s"]) <= 6.0:
            by_source.setdefault(row["source"], row)
    chosen = sorted(by_source.values(), key=lambda r: r["clip_id"])
    order = rng.permutation(len(chosen))
    clips = []
    for index in order[:limit]:
        row = chosen[int(index)]
        samples = trim_to_barks(read(CORPUS / "dogs" / row["file"]))
        if samples.size >= RATE // 5:  # a fifth of a second at least
            clips.append(Clip(row["clip_id"], row["source"], row["licence"], samples))
    return clips


def ambience_rows() -> list[dict[str, str]]:
    with open(CORPUS / "dogs" / "manifest.csv", newline="") as f:
        return sorted((r for r in csv.DictReader(f) if r["label"] == "street_ambience"),
                      key=lambda r: r["clip_id"])


def world_capsules(array: ArraySettings, centre: np.ndarray) -> np.ndarray:
    """Capsule positions in the room (x east, y north, z up), (3, capsules)."""
    # the board's +x points at compass bearing o: east sin o, north cos o; +y 90 degrees
    # counter-clockwise of it (face up)
    o = math.radians(array.orientation_deg)
    x_axis = np.array([math.sin(o), math.cos(o), 0.0])
    y_axis = np.array([-math.cos(o), math.sin(o), 0.0])
    z_axis = np.array([0.0, 0.0, 1.0])
    board = array.positions_m()
    return (centre[:, None] + np.outer(x_axis, board[:, 0]) + np.outer(y_axis, board[:, 1])
            + np.outer(z_axis, board[:, 2]))


def point_at(centre: np.ndarray, bearing_deg: float, distance_m: float, height_m: float
             ) -> np.ndarray:
    b = math.radians(bearing_deg)
    return np.array([centre[0] + distance_m * math.sin(b), centre[1] + distance_m * math.cos(b),
                     height_m])


def room(capsules: np.ndarray) -> pra.ShoeBox:
    materials = pra.make_materials(
        ceiling=1.0, floor=GROUND_ABSORPTION, east=1.0, west=1.0, south=1.0,
        north=FACADE_ABSORPTION,
    )
    box = pra.ShoeBox(list(ROOM_M), fs=RATE, materials=materials, max_order=2,
                      air_absorption=True)
    box.add_microphone_array(pra.MicrophoneArray(capsules, RATE))
    return box


def through_room(capsules: np.ndarray, position: np.ndarray, signal: np.ndarray) -> np.ndarray:
    """The signal from ``position`` at each capsule, (samples, capsules), direct sound aligned
    so that the stretch starts where the signal does."""
    box = room(capsules)
    box.add_source(list(position))
    box.compute_rir()
    direct = int(np.linalg.norm(capsules - position[:, None], axis=0).min() / 343.0 * RATE)
    start = max(0, direct - 64)
    outs = [scipy.signal.fftconvolve(signal, np.asarray(r[0])[start:]) for r in box.rir]
    length = min(o.size for o in outs)
    return np.stack([o[:length] for o in outs], axis=1)


@dataclass
class Site:
    board: str
    array: ArraySettings
    plans: dict[str, DoaPlan]  # "defaults", and "compare" with --compare
    centre: np.ndarray
    capsules: np.ndarray
    ambience: np.ndarray  # (samples, capsules): the street through the room


def make_site(board: str, rng: np.random.Generator, ambience_s: float,
              compare: DoaOptions | None = None) -> Site:
    array = ArraySettings(preset=board, orientation_deg=float(rng.uniform(0.0, 360.0)))
    facade_m = float(rng.uniform(3.0, 5.0))
    centre = np.array([ROOM_M[0] / 2, ROOM_M[1] - facade_m, ARRAY_HEIGHT_M])
    capsules = world_capsules(array, centre)
    rows = ambience_rows()
    picked = rng.choice(len(rows), size=8, replace=False)
    length = int(ambience_s * RATE)
    total = np.zeros((length, array.capsule_count))
    for k, index in enumerate(picked):
        street = np.resize(read(CORPUS / "dogs" / rows[int(index)]["file"]), length)
        bearing = 95.0 + 170.0 * (k + float(rng.uniform())) / 8
        position = point_at(centre, bearing, float(rng.uniform(20.0, 90.0)), 1.0)
        position[:2] = np.clip(position[:2], 1.0, np.array(ROOM_M[:2]) - 1.0)
        heard = through_room(capsules, position, street)[:length]
        total[: heard.shape[0]] += heard / np.sqrt(np.mean(band(heard[:, 0]) ** 2))
    plans = {"defaults": plan_doa(array, RATE)}
    if compare is not None:
        plans["compare"] = plan_doa(array, RATE, compare)
    return Site(board, array, plans, centre, capsules, total)


def dog_stretch(site: Site, clip: Clip, bearing_deg: float, distance_m: float) -> np.ndarray:
    position = point_at(site.centre, bearing_deg, distance_m, DOG_HEIGHT_M)
    pad = np.zeros(int(0.1 * RATE))
    heard = through_room(site.capsules, position, np.concatenate([pad, clip.samples, pad]))
    return heard[: clip.samples.size + 2 * pad.size]


def mix(site: Site, dog: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    start = int(rng.integers(0, site.ambience.shape[0] - dog.shape[0]))
    background = site.ambience[start:start + dog.shape[0]]
    background = background / np.sqrt(np.mean(band(background[:, 0]) ** 2))
    self_noise = rng.standard_normal(dog.shape)
    self_noise *= 10 ** (-SELF_NOISE_UNDER_AMBIENCE_DB / 20) / np.sqrt(
        np.mean(band(self_noise[:, 0]) ** 2))
    gain = 10 ** (snr_db / 20) / np.sqrt(np.mean(band(dog[:, 0]) ** 2))
    return gain * dog + background + self_noise


def error_deg(estimate: float, truth: float) -> float:
    return abs(angle_offset_deg(estimate, truth))


def summarise(errors: list[float | None], inside: list[bool]) -> dict[str, object]:
    found = [e for e in errors if e is not None]
    return {
        "stretches": len(errors),
        "with_bearing": len(found),
        "no_bearing_share": round(1 - len(found) / max(1, len(errors)), 3),
        "median_error_deg": round(float(np.median(found)), 2) if found else None,
        "p90_error_deg": round(float(np.percentile(found, 90)), 2) if found else None,
        "error_inside_uncertainty_share": round(float(np.mean(inside)), 3) if inside else None,
        # each stretch's, in the clips' order (null: no bearing), to compare runs pairwise
        "errors_deg": [None if e is None else round(e, 2) for e in errors],
    }


def estimates(site: Site, audio: np.ndarray) -> dict[str, Bearing]:
    """The stretch's bearing by each of the site's plans."""
    return {name: estimate_bearing(audio, plan) for name, plan in site.plans.items()}


def bearing_errors(site: Site, clips: list[Clip], rng: np.random.Generator
                   ) -> dict[str, dict[str, dict[str, object]]]:
    """Part 1 for each of the site's plans: {plan: {SNR: figures}}."""
    errors = {name: {snr: [] for snr in SNRS_DB} for name in site.plans}
    inside = {name: {snr: [] for snr in SNRS_DB} for name in site.plans}
    for clip in clips:
        bearing = float(rng.uniform(100.0, 260.0))
        dog = dog_stretch(site, clip, bearing, float(rng.uniform(10.0, 60.0)))
        for snr in SNRS_DB:
            for name, estimate in estimates(site, mix(site, dog, snr, rng)).items():
                if estimate.bearing_deg is None:
                    errors[name][snr].append(None)
                    continue
                error = error_deg(estimate.bearing_deg, bearing)
                errors[name][snr].append(error)
                inside[name][snr].append(error <= (estimate.uncertainty_deg or 0.0))
    return {name: {f"{snr:g}": summarise(errors[name][snr], inside[name][snr])
                   for snr in SNRS_DB} for name in site.plans}


def pair_figures(sector: PremisesSector, a: float, b: float, events: int,
                 found: list[Bearing]) -> dict[str, object]:
    """Part 2's figures for one separation from its events' bearings (A's at even indices,
    B's at odd)."""
    right = total = 0
    a_origins = dict.fromkeys((PREMISES, NO_BEARING, ELSEWHERE), 0)
    b_origins = dict.fromkeys((PREMISES, NO_BEARING, ELSEWHERE), 0)
    for k, estimate in enumerate(found):
        own, other, origins = (a, b, a_origins) if k % 2 == 0 else (b, a, b_origins)
        origins[classify_bearing(sector, estimate.bearing_deg, estimate.uncertainty_deg)] += 1
        if estimate.bearing_deg is None:
            continue
        total += 1
        right += error_deg(estimate.bearing_deg, own) < error_deg(estimate.bearing_deg, other)
    return {
        "events": events,
        "snr_db_range": [0.0, 20.0],
        "with_bearing": total,
        "right_dog_share": round(right / max(1, total), 3),
        "dog_a_in_sector": a_origins,
        "dog_b_outside_sector": b_origins,
        "sector_half_width_deg": (b - a) / 2.0,
    }


def two_dogs(site: Site, clips: list[Clip], events: int, rng: np.random.Generator
             ) -> dict[str, dict[str, dict[str, object]]]:
    """Part 2 for each of the site's plans: {plan: {separation: figures}}."""
    results: dict[str, dict[str, dict[str, object]]] = {name: {} for name in site.plans}
    for separation in SEPARATIONS_DEG:
        a = float(rng.uniform(100.0, 260.0 - separation))
        b = a + separation
        sector = PremisesSector(a, separation / 2.0, 20.0)
        found: dict[str, list[Bearing]] = {name: [] for name in site.plans}
        for k in range(events):
            own = a if k % 2 == 0 else b
            clip = clips[int(rng.integers(len(clips)))]
            dog = dog_stretch(site, clip, own, float(rng.uniform(10.0, 60.0)))
            snr = float(rng.uniform(0.0, 20.0))
            for name, estimate in estimates(site, mix(site, dog, snr, rng)).items():
                found[name].append(estimate)
        for name in site.plans:
            results[name][f"{separation:g}"] = pair_figures(sector, a, b, events, found[name])
    return results


def cost(board: str, seconds: int, repeats: int, options: DoaOptions | None = None
         ) -> dict[str, object]:
    array = ArraySettings(preset=board)
    plan = plan_doa(array, RATE, options)
    rng = np.random.default_rng(0)
    # 8 input channels as the boards deliver them; the content does not change the cost
    audio = rng.standard_normal((seconds * RATE, 8)).astype(np.float32)
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        for k in range(seconds):
            estimate_bearing(audio[k * RATE:(k + 1) * RATE], plan)
        best = min(best, (time.process_time() - started) / seconds)
    return {"cpu_s_per_audio_s": round(best, 5), "real_time_factor": round(best, 5),
            "seconds": seconds, "repeats": repeats, "capsules": array.capsule_count,
            "pairs": int(len(plan.pairs)), "bins": int(len(plan.bins)), "nfft": plan.nfft}


def options_changed(words: list[str]) -> dict[str, object]:
    """``FIELD=VALUE`` words (VALUE in JSON: 0.05, 2, false, "rise") as DoaOptions changes."""
    fields = {f.name for f in dataclasses.fields(DoaOptions)}
    changes: dict[str, object] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if key not in fields or not equals:
            raise SystemExit(f"{word!r}: not FIELD=VALUE with a field of DoaOptions "
                             f"({', '.join(sorted(fields))})")
        try:
            changes[key] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{word!r}: the value is not JSON ({exc})") from exc
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--barks", type=int, default=40, help="bark clips per board (40)")
    parser.add_argument("--events", type=int, default=40,
                        help="events per separation per board in the two-dog scene (40)")
    parser.add_argument("--cost-seconds", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--boards", nargs="+", choices=BOARDS_KNOWN, default=list(BOARDS),
                        help="array presets to simulate (default: %(default)s)")
    parser.add_argument("--compare", nargs="+", metavar="FIELD=VALUE",
                        help="also run with these DoaOptions fields changed, on the same mixes")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    changes = options_changed(args.compare) if args.compare else None
    compare = dataclasses.replace(DoaOptions(), **changes) if changes is not None else None
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    load_before = os.getloadavg()
    clips = bark_clips(args.barks, rng)
    log.info("%d bark clips from %d sources", len(clips), len({c.source for c in clips}))
    results: dict[str, object] = {
        "command": "benchmarks/bearing_sim.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        # HEAD when the run began; the modules run are the working tree's
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                 capture_output=True, text=True).stdout.strip(),
        "seed": args.seed,
        "rate_hz": RATE,
        "band_hz": list(DOG_BAND_HZ),
        "scene": {"room_m": list(ROOM_M), "max_order": 2, "ground_absorption":
                  GROUND_ABSORPTION, "facade_absorption": FACADE_ABSORPTION,
                  "array_height_m": ARRAY_HEIGHT_M, "dog_height_m": DOG_HEIGHT_M,
                  "dog_distance_m": [10.0, 60.0], "ambience_sources": 8,
                  "self_noise_under_ambience_db": SELF_NOISE_UNDER_AMBIENCE_DB},
        "clips": [{"clip_id": c.clip_id, "source": c.source, "licence": c.licence,
                   "seconds": round(c.samples.size / RATE, 2)} for c in clips],
        "boards": {},
    }
    boards: dict[str, object] = {}
    for board in args.boards:
        site = make_site(board, rng, ambience_s=30.0, compare=compare)
        log.info("%s: +x towards %.0f deg", board, site.array.orientation_deg)
        by_snr = bearing_errors(site, clips, rng)
        log.info("%s bearing error by SNR: %s", board, json.dumps(by_snr))
        pairs = two_dogs(site, clips, args.events, rng)
        log.info("%s two dogs: %s", board, json.dumps(pairs))
        figures = cost(board, args.cost_seconds, 3)
        log.info("%s cost: %s", board, figures)
        boards[board] = {"orientation_deg": round(site.array.orientation_deg, 1),
                         "bearing_error_by_snr_db": by_snr["defaults"],
                         "two_dogs": pairs["defaults"], "cost": figures}
        if compare is not None:
            compared = cost(board, args.cost_seconds, 3, compare)
            log.info("%s cost, compared: %s", board, compared)
            boards[board]["compare"] = {  # type: ignore[index]
                "options": changes, "bearing_error_by_snr_db": by_snr["compare"],
                "two_dogs": pairs["compare"], "cost": compared}
    results["boards"] = boards
    results["load_average_before"] = [round(x, 2) for x in load_before]
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["wall_s"] = round(time.monotonic() - started, 1)
    results["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
