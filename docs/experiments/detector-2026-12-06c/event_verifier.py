"""Two stages: permissive candidate events, then a verifier that keeps or drops each one from
its own scores and its neighbours' (issue 39, deliverable 2: a temporal model over patch
scores). Trained on one held-out fold's scenes, judged on the other's.

Candidates: the fused score ``sigmoid(0.5 logit(cnn) + 0.5 logit(dg))`` at a low event
threshold (``--candidates ON/OFF``). Features of a candidate, from the analyzer's own step
series (the pipeline's fused score, the fine-tuned score ``dg`` alone, the CNN alone, the
levels the wire carries): its length; the highest and mean fused score in it; the highest
``dg`` and CNN score in it; its level over the 10th percentile of the 20 s before it and itself;
how many other candidates start within 10 and 30 s before it and after it, and the highest
fused score among them; the share of the 20 s before it and itself that left the sensor as a
dog second (``dg`` present). Without the "after" features a candidate is decided when it ends
("past only"); with them, 30 s later. Label: a candidate over a bark (scene label 1) is a dog,
one over no sound at all is not; one over the rest of a dog clip only (label -1) is left out
of training.

A fold's scenes are rebuilt as ``benchmarks/judge_soundscapes.py`` builds them and their
frames read from its ``--frames-cache`` (run the judge first, same seed and network).

    python3 docs/experiments/detector-2026-12-06c/event_verifier.py \\
        --train 'docs/experiments/finetune_sensor_fold3.json:/tmp/net_a.onnx:1,2' \\
        --test 'docs/experiments/finetune_sensor_fold0.json:models/dog_yamnet.onnx:1,2' \\
        --frames-cache /tmp/det/cache

Printed: for the verifier (logistic regression and gradient-boosted trees, each with and
without the candidates after it) and for the baselines (the shipped detector, the fused score
alone, the CNN alone, each over its event thresholds), F1, hit rate at 5 dB and over and bouts
of 5+ missed at 5, 10 and 20 false alarms an hour on the test fold's confuser scenes
(interpolated between operating points), and each operating point's figures.
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
from training.finetune import held_out_sources  # noqa: E402

log = logging.getLogger("event_verifier")
STEP = J.STEP_S
FUSED = DogHead(version="fused-0.5-0.5", fusion_kind="logistic", sensor_scores=True,
                fusion=np.array([0.5, 0.5, 0.0]))
TUNED = DogHead(version="tuned", fusion_kind="head", sensor_scores=True)
CNN_ALONE = DogHead(version="cnn", fusion_kind="logistic", sensor_scores=True,
                    fusion=np.array([1.0, 0.0, 0.0]))  # the CNN's smoothed score itself
CNN = DogHead(fusion_kind="max")  # the judge's "cnn" detector
THRESHOLDS = ((0.3, 0.2), (0.5, 0.3), (0.7, 0.5), (0.8, 0.6), (0.9, 0.7), (0.95, 0.8),
              (0.98, 0.9))
FEATURES = ("length", "fused max", "fused mean", "dg max", "cnn max", "prominence",
            "before 10 s", "before 30 s", "before max", "after 10 s", "after 30 s",
            "after max", "dog seconds")
PAST_ONLY = [i for i, f in enumerate(FEATURES) if not f.startswith("after")]
# The scenes' layout (bouts 60-90 s apart, the confusers 1-8 s apart) is the judge's, not the
# world's: a verifier may learn it from the neighbour counts. Without them:
OWN_ONLY = [i for i, f in enumerate(FEATURES) if not f.startswith(("after", "before"))]


@dataclasses.dataclass
class Judged:
    """One scene's frames, series and candidates."""

    scene: J.Scene
    frames: list[Any]
    fused: np.ndarray
    dg: np.ndarray
    cnn: np.ndarray
    laf: np.ndarray
    candidates: list[tuple[float, float]]


def series(frames: list[Any], head: DogHead, n: int, cnn_only: bool = False) -> np.ndarray:
    """A head's fused step scores over the scene (``n`` steps from capture time 0)."""
    out = np.zeros(n, np.float32)
    pipeline = DevicePipeline("x", DetectorSettings(), head)
    results = []
    for frame in frames:
        if cnn_only:
            frame = dataclasses.replace(frame, class_scores=np.zeros_like(frame.class_scores))
        results.append(pipeline.feed(frame))
    results.append(pipeline.finish())
    for result in results:
        first = round(result.scores_start_ns / 1e9 / STEP)
        k = min(result.step_scores.size, n - first)
        if k > 0:
            out[first:first + k] = result.step_scores[:k]
    return out


def judged(scene: J.Scene, frames: list[Any], candidates: tuple[float, float]) -> Judged:
    n = scene.labels.size
    laf = np.full(n, np.nan, np.float32)
    for frame in frames:
        first = round(frame.capture_ns / 1e9 / STEP)
        steps = frame.laf_steps_db
        k = min(steps.size, n - first)
        if k > 0:
            laf[first:first + k] = steps[:k]
    settings = dataclasses.replace(DetectorSettings(), on_threshold=candidates[0],
                                   off_threshold=candidates[1])
    events = J.events_of(frames, FUSED, settings, False)
    return Judged(scene, frames, series(frames, FUSED, n), series(frames, TUNED, n),
                  series(frames, CNN_ALONE, n), np.nan_to_num(laf, nan=-20.0), events)


def features(j: Judged) -> np.ndarray:
    rows = []
    onsets = np.array([a for a, _ in j.candidates])
    peaks = np.array([j.fused[int(a / STEP):max(int(b / STEP), int(a / STEP) + 1)].max()
                      for a, b in j.candidates]) if j.candidates else np.zeros(0)
    for k, (a, b) in enumerate(j.candidates):
        i, e = int(a / STEP), max(int(b / STEP), int(a / STEP) + 1)
        before_it = slice(max(0, i - int(20 / STEP)), e)  # known when it ends
        others = np.arange(len(onsets)) != k
        before = {w: others & (onsets >= a - w) & (onsets < a) for w in (10, 30)}
        after = {w: others & (onsets > a) & (onsets <= b + w) for w in (10, 30)}
        rows.append([
            b - a, j.fused[i:e].max(), j.fused[i:e].mean(), j.dg[i:e].max(), j.cnn[i:e].max(),
            j.laf[i:e].max() - np.percentile(j.laf[before_it], 10),
            before[10].sum(), before[30].sum(), peaks[before[30]].max(initial=0.0),
            after[10].sum(), after[30].sum(), peaks[after[30]].max(initial=0.0),
            float((j.dg[before_it] > 0).mean()),
        ])
    return np.array(rows, np.float64).reshape(-1, len(FEATURES))


def labels(j: Judged) -> np.ndarray:
    """1 over a bark, 0 over no sound, -1 over only the rest of a dog clip."""
    barks = J.runs(j.scene.labels == 1, 0.1)
    sounding = J.runs(j.scene.labels != 0, 0.0)
    dog = J._hits(j.candidates, barks)
    any_sound = J._hits(j.candidates, sounding)
    return np.where(dog, 1, np.where(any_sound, -1, 0))


def load(spec: str, cache: Path, candidates: tuple[float, float], confuser_bouts: bool
         ) -> list[Judged]:
    """``REPORT:NETWORK:SEEDS`` -> every scene of those seeds, judged."""
    report, network, seeds = spec.split(":")
    held = held_out_sources(Path(report))
    out = []
    with tempfile.TemporaryDirectory() as workdir:
        for seed in (int(s) for s in seeds.split(",")):
            scenes, _ = J.scenes_of(held, seed, list(J.DEFAULT_CORPORA),
                                    confuser_bouts=confuser_bouts)
            for scene in scenes:
                frames = J.measured(scene, Path(workdir), cache, Path(network))
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
        cells.append(f"{rate:g}/h: F1 {v[0]:.3f} hit {v[1]:.2f} missed {v[2]:.0f}")
    return "; ".join(cells)


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
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    on, off = (float(x) for x in args.candidates.split("/"))
    train = load(args.train, args.frames_cache, (on, off), args.confuser_bouts)
    test = load(args.test, args.frames_cache, (on, off), args.confuser_bouts)
    x_train = np.concatenate([features(j) for j in train])
    y_train = np.concatenate([labels(j) for j in train])
    keep = y_train >= 0
    log.info("training: %d candidates, %d dog, %d not, %d left out", y_train.size,
             (y_train == 1).sum(), (y_train == 0).sum(), (~keep).sum())
    models = {
        "logistic": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)),
        "trees": lambda: HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05,
                                                        max_leaf_nodes=15, random_state=0),
    }
    report: dict[str, Any] = {"candidates": args.candidates, "train": args.train,
                              "test": args.test, "families": {}}
    rates = (5.0, 10.0, 20.0)
    for model_name, make in models.items():
        for columns_name, columns in (("all", list(range(len(FEATURES)))),
                                      ("past only", PAST_ONLY), ("own only", OWN_ONLY)):
            model = make().fit(x_train[keep][:, columns], y_train[keep])
            probs = [model.predict_proba(features(j)[:, columns])[:, 1]
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
            settings = dataclasses.replace(DetectorSettings(), on_threshold=b_on,
                                           off_threshold=b_off)
            if name == "shipped":
                head = dataclasses.replace(head, on_threshold=b_on, off_threshold=b_off)
            rows = [(j.scene, J.events_of(j.frames, head, settings, cnn_only)) for j in test]
            points.append({"threshold": f"{b_on:g}/{b_off:g}", **figures(rows)})
        report["families"][name] = points
        print(f"{name}: {at_rates(points, rates)}", flush=True)
        if args.confuser_bouts:
            print(f"    on confuser bouts: {at_rates(points, rates, 'bouts fa/h')}")
    shipped_default = [(j.scene, J.events_of(j.frames, DogHead.load(ANALYZER_HEAD_PATH),
                                             DetectorSettings(), False)) for j in test]
    report["shipped as shipped"] = figures(shipped_default)
    print("shipped as shipped:", report["shipped as shipped"])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
