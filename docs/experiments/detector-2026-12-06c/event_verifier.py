"""Two stages: permissive candidate events, then a verifier that keeps or drops each one
(issue 39, deliverable 2: a temporal model over patch scores). Trained on one held-out fold's
scenes, judged on the other's.

Candidates: the shipped fusion ``sigmoid(0.5 logit(cnn) + 0.5 logit(dg))`` at low event
thresholds (``--candidates ON/OFF``), found and described by the analyzer's own pipeline
(``DevicePipeline`` with a verifier that keeps all: ``analyzer.detect.verifier.FEATURES``, all
known when a candidate ends). Label: a candidate over a bark (scene label 1) is a dog, one over
no sound at all is not; one over the rest of a dog clip only (label -1) is left out of training.
Verifiers: gradient-boosted trees and logistic regression, each on every feature ("past only")
and without the earlier candidates ("own only").

A fold's scenes are rebuilt as ``benchmarks/judge_soundscapes.py`` builds them and their
frames read from its ``--frames-cache`` (run the judge first, same seed and network; with
``--confuser-bouts`` for that scene).

    python3 docs/experiments/detector-2026-12-06c/event_verifier.py \\
        --train 'REPORT_FOLD3.json:NETWORK_FOLD3.onnx:1,2' \\
        --test 'docs/experiments/finetune_sensor_fold0.json:models/dog_yamnet.onnx:1,2' \\
        --frames-cache /tmp/det/cache --confuser-bouts

Printed: for each verifier and for the baselines (the shipped detector and the judge's CNN,
each over its event thresholds), F1, hit rate at 5 dB and over and bouts of 5+ missed at 5, 10
and 20 false alarms an hour on the test fold's confuser scene and confuser bouts scene
(interpolated between operating points); ``--out`` keeps every operating point. ``--export
PATH --keep-at P``: the trees trained on the candidates of both --train and --test, written as
the analyzer's verifier file (``[detector] verifier_path``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import judge_soundscapes as J  # noqa: E402
from sklearn.ensemble import HistGradientBoostingClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from analyzer.config import DetectorSettings  # noqa: E402
from analyzer.detect import DevicePipeline  # noqa: E402
from analyzer.detect.head import ANALYZER_HEAD_PATH, DogHead  # noqa: E402
from analyzer.detect.verifier import FEATURES, NO_VERIFIER, VerifierModel  # noqa: E402
from sensor.gate import GateSettings  # noqa: E402
from training.head_data import held_out_sources  # noqa: E402
from training.verifier import verifier_model  # noqa: E402

log = logging.getLogger("event_verifier")
STEP = J.STEP_S
FUSED = DogHead(version="fused-0.5-0.5", fusion_kind="logistic", sensor_scores=True,
                fusion=np.array([0.5, 0.5, 0.0]))
CNN = DogHead(fusion_kind="max")  # the judge's "cnn" detector
THRESHOLDS = ((0.3, 0.2), (0.5, 0.3), (0.7, 0.5), (0.8, 0.6), (0.9, 0.7), (0.95, 0.8),
              (0.98, 0.9))
# all known when a candidate ends: analyzer.detect.verifier.FEATURES; without its neighbours:
OWN_ONLY = [i for i, f in enumerate(FEATURES) if not f.startswith("before")]
# without anything of how busy the time before it was (the judge's scenes teach density as a
# confuser: the far continuous scene missed, docs/DETECTOR.md eleventh step)
NO_DENSITY = [i for i, f in enumerate(FEATURES)
              if not f.startswith("before") and f != "dog seconds"]


@dataclasses.dataclass
class Judged:
    """One scene's frames, its candidates and their features (the analyzer's own pipeline)."""

    scene: J.Scene
    frames: list[Any]
    candidates: list[tuple[float, float]]
    features: np.ndarray


def judged(scene: J.Scene, frames: list[Any], candidates: tuple[float, float]) -> Judged:
    pipeline = DevicePipeline("x", DetectorSettings(), FUSED,
                              verifier=VerifierModel.keeping_all(*candidates))
    pipeline.candidates = []
    for frame in frames:
        pipeline.feed(frame)
    pipeline.finish()
    events = [(e.onset_ns / 1e9, e.offset_ns / 1e9) for e, _, _ in pipeline.candidates]
    x = np.array([f for _, f, _ in pipeline.candidates]).reshape(-1, len(FEATURES))
    return Judged(scene, frames, events, x)


def labels(j: Judged) -> np.ndarray:
    """1 over a bark, 0 over no sound, -1 over only the rest of a dog clip."""
    barks = J.runs(j.scene.labels == 1, 0.1)
    sounding = J.runs(j.scene.labels != 0, 0.0)
    dog = J._hits(j.candidates, barks)
    any_sound = J._hits(j.candidates, sounding)
    return np.where(dog, 1, np.where(any_sound, -1, 0))


def load(spec: str, cache: Path, candidates: tuple[float, float], confuser_bouts: bool,
         sustained: bool = False, voiced: bool = False,
         gate: GateSettings | None = None) -> list[Judged]:
    """``REPORT:NETWORK:SEEDS`` -> every scene of those seeds, judged."""
    report, network, seeds = spec.split(":")
    held = held_out_sources(Path(report))
    out = []
    with tempfile.TemporaryDirectory() as workdir:
        for seed in (int(s) for s in seeds.split(",")):
            scenes, _ = J.scenes_of(held, seed, list(J.DEFAULT_CORPORA),
                                    confuser_bouts=confuser_bouts, sustained=sustained,
                                    voiced=voiced)
            for scene in scenes:
                frames = J.measured(scene, Path(workdir), cache, Path(network), gate)
                scene.samples = np.zeros(0)  # judged by its labels alone: memory
                out.append(judged(scene, frames, candidates))
                log.info("%s seed %d %s: %d candidates", Path(report).stem, seed, scene.name,
                         len(out[-1].candidates))
    return out


def figures(rows: list[tuple[J.Scene, list[tuple[float, float]]]]) -> dict[str, Any]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for scene, events in rows:
        kinds.setdefault(J.kind_of(scene), []).append(J.judge_scene(scene, events))
    d, c = J.summed(kinds["dog scenes"]), J.summed(kinds["confuser scene"])
    out = {"fa/h": c["false alarms per hour"], "F1": d["segment precision/recall/F1"][2],
           "P": d["segment precision/recall/F1"][0], "R": d["segment precision/recall/F1"][1],
           "hit 5+": d["hit rate 5..inf dB"], "hit 0..5": d["hit rate 0..5 dB"],
           "5+ missed": d["bouts of 5+ missed"][0], "bouts": d["bouts of 5+ missed"][1],
           "dog-scene fa": d["false alarms"]}
    if "confuser bouts scene" in kinds:
        out["bouts fa/h"] = J.summed(kinds["confuser bouts scene"])["false alarms per hour"]
    if "sustained barking scene" in kinds:
        sustained = J.summed(kinds["sustained barking scene"])
        out["sustained R"] = sustained.get("segment precision/recall/F1", [0, 0, 0])[1]
        out["sustained held"] = sustained["bouts of 3+ min held"]
    if "barks under voices scene" in kinds:
        voiced = J.summed(kinds["barks under voices scene"])
        counts = [v for k, v in voiced.items() if k.startswith("barks ")]
        out["voiced hit"] = sum(c[0] for c in counts) / max(1, sum(c[1] for c in counts))
        out["voiced fa"] = voiced["false alarms"]
    return out


def at_rates(points: list[dict[str, Any]], rates: tuple[float, ...], key: str = "fa/h") -> str:
    """F1, hit rate at 5 dB and over and bouts of 5+ missed at each false-alarm rate ``key``
    (interpolated between operating points; "-" outside them)."""
    points = sorted((p for p in points if key in p), key=lambda p: p[key])
    fa = np.array([p[key] for p in points])
    cells = []
    for rate in rates:
        if not points or not fa[0] <= rate <= fa[-1]:
            cells.append(f"{rate:g}/h: -")
            continue
        v = [float(np.interp(rate, fa, [p[k] for p in points]))
             for k in ("F1", "hit 5+", "5+ missed")]
        cell = f"{rate:g}/h: F1 {v[0]:.3f} hit {v[1]:.2f} missed {v[2]:.0f}"
        if "sustained R" in points[0]:
            r = float(np.interp(rate, fa, [p["sustained R"] for p in points]))
            held = float(np.interp(rate, fa, [p["sustained held"][0] for p in points]))
            cell += f" sustained R {r:.2f} held {held:.1f}/{points[0]['sustained held'][1]}"
        if "voiced hit" in points[0]:
            r = float(np.interp(rate, fa, [p["voiced hit"] for p in points]))
            cell += f" under voices {r:.2f}"
        cells.append(cell)
    return "; ".join(cells)


def trees() -> HistGradientBoostingClassifier:
    return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15,
                                          random_state=0)


def export(args: argparse.Namespace, scenes: list[Judged], candidates: tuple[float, float]
           ) -> int:
    x = np.concatenate([j.features for j in scenes])
    y = np.concatenate([labels(j) for j in scenes])
    keep = y >= 0
    if args.no_density:  # constant columns: the trees cannot split on them
        x[:, [i for i in range(len(FEATURES)) if i not in NO_DENSITY]] = 0.0
    model = trees().fit(x[keep], y[keep])
    version = (f"dog-verifier-1.0-c{args.candidates.replace('/', '-')}-k{args.keep_at:g}"
               + ("-nd" if args.no_density else "") + ("-sus" if args.sustained else "")
               + ("-voi" if args.voiced else ""))
    verifier_model(model, version, args.keep_at, *candidates).save(args.export)
    log.info("%s: %d candidates (%d dog), written to %s", version, keep.sum(),
             (y == 1).sum(), args.export)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, metavar="REPORT:NETWORK:SEEDS")
    parser.add_argument("--test", required=True, metavar="REPORT:NETWORK:SEEDS")
    parser.add_argument("--frames-cache", type=Path, required=True)
    parser.add_argument("--candidates", default="0.3/0.2", metavar="ON/OFF")
    parser.add_argument("--confuser-bouts", action="store_true",
                        help="judge the confuser bouts scene too (judge_soundscapes.py "
                        "--confuser-bouts must have measured it)")
    parser.add_argument("--sustained", action="store_true",
                        help="train and judge on the sustained barking scene too "
                        "(judge_soundscapes.py --sustained must have measured it)")
    parser.add_argument("--sustained-test-only", action="store_true",
                        help="judge on the sustained barking scene, train without it (what a "
                        "verifier trained before it existed does there)")
    parser.add_argument("--voiced", action="store_true",
                        help="train and judge on the barks under voices scene too "
                        "(judge_soundscapes.py --voiced must have measured it, or it is "
                        "measured here)")
    parser.add_argument("--voiced-test-only", action="store_true",
                        help="judge on the barks under voices scene, train without it")
    parser.add_argument("--candidate-scores", action="store_true",
                        help="scenes measured with the gate's [privacy] candidate_scores "
                        "(judge_soundscapes.py --candidate-scores must have measured them)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--export", type=Path, metavar="NPZ",
                        help="train the trees on --train and --test together and write them")
    parser.add_argument("--no-density", action="store_true",
                        help="with --export: trees that ignore the earlier candidates and the "
                        "dog seconds")
    parser.add_argument("--keep-at", type=float, default=0.5,
                        help="with --export: the probability a candidate needs to be kept")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    on, off = (float(x) for x in args.candidates.split("/"))
    gate = GateSettings(candidate_scores=args.candidate_scores)
    train = load(args.train, args.frames_cache, (on, off), args.confuser_bouts, args.sustained,
                 args.voiced, gate)
    test = load(args.test, args.frames_cache, (on, off), args.confuser_bouts,
                args.sustained or args.sustained_test_only, args.voiced or args.voiced_test_only,
                gate)
    x_train = np.concatenate([j.features for j in train])
    y_train = np.concatenate([labels(j) for j in train])
    keep = y_train >= 0
    log.info("training: %d candidates, %d dog, %d not, %d left out", y_train.size,
             (y_train == 1).sum(), (y_train == 0).sum(), (~keep).sum())
    if args.export:
        return export(args, train + test, (on, off))
    models = {
        "logistic": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "trees": trees,
    }
    report: dict[str, Any] = {"candidates": args.candidates, "train": args.train,
                              "test": args.test, "families": {}}
    rates = (5.0, 10.0, 20.0)
    for model_name, make in models.items():
        for columns_name, columns in (("past only", list(range(len(FEATURES)))),
                                      ("own only", OWN_ONLY), ("no density", NO_DENSITY)):
            model = make().fit(x_train[keep][:, columns], y_train[keep])
            probs = [model.predict_proba(j.features[:, columns])[:, 1]
                     if j.candidates else np.zeros(0) for j in test]
            points = []
            for t in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
                rows = [(j.scene, [c for c, p in zip(j.candidates, prob, strict=True) if p >= t])
                        for j, prob in zip(test, probs, strict=True)]
                points.append({"threshold": t, **figures(rows)})
            name = f"verifier {model_name}, {columns_name}"
            report["families"][name] = points
            print(f"{name}: {at_rates(points, rates)}", flush=True)
            if args.confuser_bouts:
                print(f"    on confuser bouts: {at_rates(points, rates, 'bouts fa/h')}")
    # (the shipped head is the fused score at 0.9 / 0.7: its family is the fused score's)
    baselines = {"shipped": (DogHead.load(ANALYZER_HEAD_PATH), False), "cnn": (CNN, True)}
    for name, (head, cnn_only) in baselines.items():
        points = []
        for b_on, b_off in THRESHOLDS:
            settings = dataclasses.replace(DetectorSettings(verifier_path=NO_VERIFIER),
                                           on_threshold=b_on,
                                           off_threshold=b_off)
            if name == "shipped":
                head = dataclasses.replace(head, on_threshold=b_on, off_threshold=b_off)
            rows = [(j.scene, J.events_of(j.frames, head, settings, cnn_only)) for j in test]
            points.append({"threshold": f"{b_on:g}/{b_off:g}", **figures(rows)})
        report["families"][name] = points
        print(f"{name}: {at_rates(points, rates)}", flush=True)
        if args.confuser_bouts:
            print(f"    on confuser bouts: {at_rates(points, rates, 'bouts fa/h')}")
    # the fusion as shipped until 2026-12-07 (no verifier), as the earlier reports measured it
    shipped_default = [(j.scene, J.events_of(j.frames, DogHead.load(ANALYZER_HEAD_PATH),
                                             DetectorSettings(verifier_path=NO_VERIFIER),
                                             False)) for j in test]
    report["shipped as shipped"] = figures(shipped_default)
    print("shipped as shipped:", report["shipped as shipped"])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
