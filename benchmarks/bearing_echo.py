"""The facade's echo and the bearing, fast (issue 36): variants of the estimate compared on
identical stretches of one bearing_sim scene.

``benchmarks/bearing_sim.py`` builds each stretch through pyroomacoustics, which takes most of
its minutes; the estimate itself takes milliseconds. This script builds the stretches of its
"bearing error by SNR" part once, exactly as bearing_sim does for a board simulated first
(the same seed gives the same clips, scene, bearings, distances and mixes), keeps them in a
cache, and then runs :func:`sensor.doa.estimate_bearing` with each variant of
:class:`sensor.doa.DoaOptions` over the same stretches. Besides the error it counts the
stretches whose bearing lies nearer the facade's mirror image of the dog than the dog.

    .venv/bin/python benchmarks/bearing_echo.py --seed 3 --boards respeaker-4mic \\
        respeaker-6mic --variant before bin_onsets=false min_sharpness=0.15 --variant now

Each ``--variant NAME FIELD=VALUE ...`` names DoaOptions fields to change (none: the
defaults; VALUE in JSON). The first run of a seed and board builds its stretches (about a
minute); later runs take seconds. A benchmark for choosing options, not a test; the
variants tried and their figures are in docs/BEARING.md ("Figures", fourth step).
"""

from __future__ import annotations

# isort: off
from single_thread import ROOT  # noqa: F401  first: one BLAS thread before numpy loads
# isort: on
import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
from pathlib import Path  # noqa: E402

import bearing_sim as sim  # noqa: E402
import numpy as np  # noqa: E402

from sensor.doa import DoaOptions, estimate_bearing, plan_doa  # noqa: E402

log = logging.getLogger("bearing_echo")
SNRS_DB = (0.0, 5.0, 10.0, 20.0)  # the goal's; -5 dB is mixed (to keep the draws) but not kept


def mirror_bearing_deg(site: sim.Site, bearing_deg: float, distance_m: float) -> float:
    """The compass bearing of the dog's image in the facade (the box's north wall)."""
    dog = sim.point_at(site.centre, bearing_deg, distance_m, sim.DOG_HEIGHT_M)
    image = np.array([dog[0], 2 * sim.ROOM_M[1] - dog[1]])
    east, north = image - site.centre[:2]
    return math.degrees(math.atan2(east, north)) % 360.0


def build(board: str, seed: int, barks: int, cache: Path) -> Path:
    """The stretches of bearing_sim's first part for ``board`` simulated first with ``seed``,
    saved once to ``cache``."""
    path = cache / f"{board}_seed{seed}_barks{barks}.npz"
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    clips = sim.bark_clips(barks, rng)
    site = sim.make_site(board, rng, ambience_s=30.0)
    arrays: dict[str, np.ndarray] = {}
    truth, mirror = [], []
    for k, clip in enumerate(clips):
        bearing = float(rng.uniform(100.0, 260.0))
        distance = float(rng.uniform(10.0, 60.0))
        dog = sim.dog_stretch(site, clip, bearing, distance)
        truth.append(bearing)
        mirror.append(mirror_bearing_deg(site, bearing, distance))
        for snr in sim.SNRS_DB:
            audio = sim.mix(site, dog, snr, rng)
            if snr in SNRS_DB:
                arrays[f"s{k}_{snr:g}"] = audio.astype(np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, truth=np.array(truth), mirror=np.array(mirror),
             orientation=np.array(site.array.orientation_deg), **arrays)
    log.info("%s seed %d: %d stretches cached in %s", board, seed, len(clips), path)
    return path


def evaluate(board: str, path: Path, options: DoaOptions) -> dict[str, dict[str, object]]:
    data = np.load(path)
    array = sim.ArraySettings(preset=board, orientation_deg=float(data["orientation"]))
    plan = plan_doa(array, sim.RATE, options)
    results = {}
    for snr in SNRS_DB:
        errors: list[float | None] = []
        inside, mirrored = [], 0
        for k, (truth, mirror) in enumerate(zip(data["truth"], data["mirror"], strict=True)):
            estimate = estimate_bearing(data[f"s{k}_{snr:g}"], plan)
            if estimate.bearing_deg is None:
                errors.append(None)
                continue
            error = sim.error_deg(estimate.bearing_deg, float(truth))
            errors.append(error)
            inside.append(error <= (estimate.uncertainty_deg or 0.0))
            mirrored += sim.error_deg(estimate.bearing_deg, float(mirror)) < error
        summary = sim.summarise(errors, inside)
        summary["nearer_the_mirror"] = mirrored
        results[f"{snr:g}"] = summary
    return results


def parse_variant(words: list[str]) -> tuple[str, dict[str, object]]:
    return words[0], sim.options_changed(words[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--barks", type=int, default=80)
    parser.add_argument("--boards", nargs="+", choices=sim.BOARDS_KNOWN,
                        default=["respeaker-4mic", "respeaker-6mic"])
    parser.add_argument("--variant", nargs="+", action="append", metavar="NAME FIELD=VALUE",
                        help="a name and the DoaOptions fields it changes (repeatable)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bearing_echo"),
                        help="where the built stretches are kept (%(default)s)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    variants = [parse_variant(v) for v in (args.variant or [["defaults"]])]
    results: dict[str, dict[str, object]] = {}
    for board in args.boards:
        path = build(board, args.seed, args.barks, args.cache)
        for name, changes in variants:
            by_snr = evaluate(board, path, dataclasses.replace(DoaOptions(), **changes))
            results.setdefault(board, {})[name] = by_snr
            cells = "  ".join(
                f"{snr}: {c['median_error_deg']} ({c['p90_error_deg']}; "
                f"{c['no_bearing_share']:.0%}; mirror {c['nearer_the_mirror']})"
                for snr, c in by_snr.items())
            log.info("%-15s %-12s %s", board, name, cells)
    if args.out:
        args.out.write_text(json.dumps({"seed": args.seed, "barks": args.barks,
                                        "variants": dict(variants), "results": results},
                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
