"""The word and voice attacks on the wire (issue 34, item 3): ``barkwatch-train privacy
--attack words|voices``.

An attacker who receives a sensor's frames and knows when someone spoke trains a classifier on
what the frames carry around each utterance (:mod:`training.privacy_features`) of a stream laid
out as a deployed sensor hears it (:mod:`training.privacy_stream`):

- **words**: which of ten spoken digits (the Free Spoken Digit Dataset, ``words/``), trained on
  five speakers and tested on the sixth, each in turn (leave one speaker out): chance 10 %;
- **voices**: which speaker, trained on some words and tested on words it never saw from
  anyone (leave one word out; with more than ten words, five folds of words), so it must know
  the voice, not the word. Neither corpus records sessions (each voice is one recording
  session), so utterances of a session cannot be kept apart beyond that. ``words/``'s six
  speakers each recorded in their own room with their own microphone, so that figure measures
  room and microphone too; ``extra/``'s called game phrases (``kajongg:``, eight voices) share
  one channel. Chance is one over the number of voices.

Each figure is given per group of wire fields (:data:`training.privacy_features.GROUPS`); a
group the wire does not carry scores chance, which is the point of a speech gate. Classifiers:
logistic regression on standardised features (scikit-learn, L2, ``C`` fixed beforehand, not
tuned on the held-out data) and optionally a small MLP; a control trains the logistic
regression on shuffled labels (it must score near chance). For words, the attacker may also
adapt to each speaker without labels (features standardised within each speaker's
utterances, as speech recognisers normalise a channel): ``words/``'s speakers each have their
own room and microphone, and this takes the channel out.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.privacy_features import GROUPS, Features, Progress, cached_features
from training.privacy_stream import (
    StreamConditions,
    StreamError,
    Utterance,
    plan_stream,
    read_voices,
    read_words,
    stream_seconds,
)

log = logging.getLogger(__name__)

SPEECH_OVER_FLOOR_DB = {35.0: 70.0, 45.0: 55.0}  # the two conditions (30 and 10 dB SNR)
CLASSIFIERS = ("logreg", "mlp")
LOGREG_C = 0.05  # L2 strength, fixed before measuring (a smaller C suits many columns)
VOICE_FOLDS = 5  # folds of words for the voice attack when there are more than ten words
ADAPTED = "logreg, standardised per speaker"
DEFAULT_CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / "barkwatch-privacy"


class AttackError(ValueError):
    """A split or input the attacks cannot run on; the message says what."""


Fold = tuple[str, np.ndarray, np.ndarray]  # (name, training rows, test rows)


def leave_one_out(groups: Sequence[str]) -> list[Fold]:
    """One fold per distinct group: train on the others, test on it."""
    values = np.asarray(groups)
    names = sorted(set(groups))
    if len(names) < 2:
        raise AttackError(f"leave one out needs two groups or more, got {names}")
    return [(name, np.flatnonzero(values != name), np.flatnonzero(values == name))
            for name in names]  # fmt: skip


def group_folds(groups: Sequence[str], n_folds: int, seed: int) -> list[Fold]:
    """``n_folds`` folds of whole groups (a seeded shuffle of the groups dealt in turn)."""
    names = sorted(set(groups))
    if len(names) < n_folds:
        raise AttackError(f"{n_folds} folds need {n_folds} groups or more, got {len(names)}")
    order = np.random.default_rng(seed).permutation(len(names))
    fold_of = {names[int(g)]: i % n_folds for i, g in enumerate(order)}
    folds = np.array([fold_of[g] for g in groups])
    return [(f"fold {k + 1}", np.flatnonzero(folds != k), np.flatnonzero(folds == k))
            for k in range(n_folds)]  # fmt: skip


def make_classifier(name: str, seed: int) -> Any:
    """A scikit-learn pipeline: standardisation, then logistic regression or a small MLP."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(C=LOGREG_C, max_iter=3000))
    if name == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier(
            (256,), alpha=1e-2, early_stopping=True, max_iter=300, random_state=seed))  # fmt: skip
    raise AttackError(f"no classifier {name!r}: one of {', '.join(CLASSIFIERS)}")


def cross_validated(
    x: np.ndarray, labels: Sequence[str], folds: list[Fold], classifier: str, seed: int,
    shuffled: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Accuracy on each fold's test rows of ``classifier`` trained on its training rows (with
    ``shuffled``, on training labels in a seeded random order: a control that must score about
    chance); ``mean``: over folds; ``pooled``: over all test rows."""
    y = np.asarray(labels)
    rng = np.random.default_rng(seed)
    per_fold, right, tested = {}, 0, 0
    for name, train, test in folds:
        targets = rng.permutation(y[train]) if shuffled else y[train]
        if len(set(targets)) < 2:
            predicted = np.full(test.size, targets[0])
        else:
            model = make_classifier(classifier, seed).fit(x[train], targets)
            predicted = model.predict(x[test])
        hits = int(np.sum(predicted == y[test]))
        per_fold[name] = round(hits / test.size, 4)
        right, tested = right + hits, tested + test.size
    return {"mean": round(float(np.mean(list(per_fold.values()))), 4),
            "pooled": round(right / tested, 4), "per_fold": per_fold}  # fmt: skip


def standardised_within(x: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """``x`` with every column standardised within each group's rows (mean 0, deviation 1):
    an attacker's unsupervised adaptation to a device or voice from its own unlabelled
    utterances (it takes out each channel's and voice's average, as cepstral mean
    normalisation does in speech recognition)."""
    out = np.asarray(x, dtype=np.float64).copy()
    values = np.asarray(groups)
    for group in set(groups):
        rows = values == group
        out[rows] = (out[rows] - out[rows].mean(axis=0)) / (out[rows].std(axis=0) + 1e-6)
    return out


def attack_split(features: Features, attack: str, seed: int) -> tuple[tuple[str, ...],
                                                                      list[Fold], str]:
    """(labels, folds, the split in words) of ``attack`` (``words`` or ``voices``)."""
    if attack == "words":
        return features.words, leave_one_out(features.speakers), "leave one speaker out"
    if attack == "voices":
        words = set(features.words)
        if len(words) <= 10:
            return (features.speakers, leave_one_out(features.words),
                    "leave one word out (the test words unseen in training)")
        return (features.speakers, group_folds(features.words, VOICE_FOLDS, seed),
                f"{VOICE_FOLDS} folds of whole words (the test words unseen in training)")
    raise AttackError(f"no attack {attack!r}: words or voices")


def evaluate(features: Features, attack: str, classifiers: Sequence[str],
             groups: Sequence[str], seed: int, control: bool = True,
             adapt: bool = True) -> dict[str, Any]:
    """Every classifier on every feature group, on the attack's split; the figures as a dict.
    With ``adapt`` (words only: the speaker is not what is guessed), also the logistic
    regression on features standardised within each speaker (:func:`standardised_within`)."""
    labels, folds, split = attack_split(features, attack, seed)
    classes = sorted(set(labels))
    out: dict[str, Any] = {
        "split": split, "classes": len(classes), "chance": round(1.0 / len(classes), 4),
        "utterances": features.n, "wire_version": features.wire_version,
        "frames_around_utterances_sent_as": features.frame_kinds, "groups": {},
    }  # fmt: skip
    for group in groups:
        x = features.matrix(group)
        entry: dict[str, Any] = {"fields": features.group_fields(group),
                                 "columns": int(x.shape[1]),
                                 "carried": features.carried(group)}  # fmt: skip
        for classifier in classifiers:
            started = time.monotonic()
            entry[classifier] = cross_validated(x, labels, folds, classifier, seed)
            log.info("%s, %s, %s: accuracy %.3f (mean over %d folds; chance %.3f; %.0f s)",
                     attack, group, classifier, entry[classifier]["mean"], len(folds),
                     out["chance"], time.monotonic() - started)  # fmt: skip
        if adapt and attack == "words":
            entry[ADAPTED] = cross_validated(standardised_within(x, features.speakers), labels,
                                             folds, "logreg", seed)  # fmt: skip
            log.info("%s, %s, %s: accuracy %.3f", attack, group, ADAPTED, entry[ADAPTED]["mean"])
        out["groups"][group] = entry
    if control:
        group = groups[0]
        out["control"] = {"group": group, "classifier": "logreg, labels shuffled in training",
                          **cross_validated(features.matrix(group), labels, folds, "logreg",
                                            seed, shuffled=True)}  # fmt: skip
        log.info("%s, control (%s, shuffled labels): accuracy %.3f", attack, group,
                 out["control"]["mean"])  # fmt: skip
    return out


# ---- the command ---------------------------------------------------------------------------


def add_recognition_arguments(parser: argparse.ArgumentParser) -> None:
    """``barkwatch-train privacy``'s options of the word and voice attacks."""
    group = parser.add_argument_group(
        "word and voice attacks (--attack words|voices)",
        "Lay the corpus's utterances into one continuous stream at 48 kHz (a random offset "
        "each, speech over a pink-noise floor), run it through the sensor's FrameBuilder and "
        "SensorNetworks and the wire's encode/decode, and train classifiers on what the frames "
        "carry around each utterance: which word (--corpus words/: leave one speaker out) or "
        "which voice (--corpus words/ or extra/: the test words unseen in training).",
    )
    group.add_argument("--floor", type=float, action="append", default=[], metavar="DB",
                       help="the noise floor, LAeq dB SPL (pink noise); speech is 70 dB over "
                       "35 and 55 dB over 45 unless --speech-db says (repeatable; default 35)")
    group.add_argument("--speech-db", type=float, metavar="DB",
                       help="LAeq of each utterance over its duration, dB SPL")
    group.add_argument("--voices", default="kajongg:", metavar="PREFIX",
                       help="with an extra/-style corpus: the voices (manifest group) starting "
                       "with PREFIX (default %(default)s: one game's phrases, one channel)")
    group.add_argument("--classifier", action="append", default=[], choices=CLASSIFIERS,
                       help="logreg (standardised logistic regression, the default) and/or mlp "
                       "(one hidden layer of 256) (repeatable)")
    group.add_argument("--group", action="append", default=[], choices=tuple(GROUPS),
                       help="feature groups to score (repeatable; default all of them)")
    group.add_argument("--no-control", action="store_true",
                       help="skip the shuffled-label control")
    group.add_argument("--no-adapt", action="store_true",
                       help="words: skip the logistic regression on features standardised "
                       "within each speaker (an attacker's unsupervised adaptation to a "
                       "device from its own unlabelled utterances)")
    group.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, metavar="DIR",
                       help="keep the decoded frames' features here, keyed by corpus, "
                       "conditions and sensor code, so a re-run skips the sensor "
                       "(default %(default)s)")
    group.add_argument("--threads", type=int, default=1,
                       help="BLAS threads for the classifiers (default %(default)s)")


def read_utterances(corpus: Path, attack: str, voices: str, limit: int) -> list[Utterance]:
    """The corpus's utterances: a ``words/``-style manifest (``word``, ``speaker`` columns)
    for either attack, or for ``voices`` an ``extra/``-style one's speech of ``voices``."""
    header = (corpus / "manifest.csv").read_text().partition("\n")[0].split(",")
    if {"word", "speaker"} <= set(header):
        return read_words(corpus, limit)
    if attack == "words":
        raise AttackError(f"{corpus}/manifest.csv has no 'word' and 'speaker' columns: the "
                          "word attack needs words/ (the spoken digits)")  # fmt: skip
    return read_voices(corpus, voices, limit)


def conditions_of(args: argparse.Namespace) -> list[StreamConditions]:
    out = []
    for floor in args.floor or [35.0]:
        speech = args.speech_db if args.speech_db is not None else SPEECH_OVER_FLOOR_DB.get(floor)
        if speech is None:
            raise AttackError(f"--floor {floor:g}: give --speech-db (defaults exist for "
                              f"{', '.join(f'{f:g}' for f in SPEECH_OVER_FLOOR_DB)} dB)")
        out.append(StreamConditions(speech_db=speech, floor_db=floor, seed=args.seed))
    return out


def run_recognition(args: argparse.Namespace, progress: Progress | None = None) -> dict[str, Any]:
    """The ``words`` or ``voices`` attack as the command's arguments say; the figures."""
    from threadpoolctl import threadpool_limits

    import sensor

    started = time.monotonic()
    utterances = read_utterances(args.corpus, args.attack, args.voices, args.limit)
    log.info("%d utterances of %d speakers from %s", len(utterances),
             len({u.speaker for u in utterances}), args.corpus)  # fmt: skip
    report: dict[str, Any] = {
        "attack": args.attack, "corpus": str(args.corpus), "utterances": len(utterances),
        "speakers": sorted({u.speaker for u in utterances}),
        "words": len({u.word for u in utterances}), "seed": args.seed,
        "sensor_package": str(Path(sensor.__file__).resolve().parent),
        "noise": "pink (Kellet filter), continuous", "conditions": {},
    }  # fmt: skip
    classifiers = args.classifier or ["logreg"]
    groups = args.group or list(GROUPS)
    for conditions in conditions_of(args):
        placements = plan_stream(utterances, conditions)
        log.info("stream: %d s at %d Hz, speech %g dB over a %g dB floor", stream_seconds(
            placements), conditions.rate, conditions.speech_db, conditions.floor_db)  # fmt: skip
        features = cached_features(utterances, placements, conditions, args.cache_dir, progress)
        with threadpool_limits(limits=max(1, args.threads)):
            figures = evaluate(features, args.attack, classifiers, groups, args.seed,
                               control=not args.no_control, adapt=not args.no_adapt)  # fmt: skip
        name = f"speech {conditions.speech_db:g} dB over {conditions.floor_db:g} dB"
        report["conditions"][name] = {"stream_s": stream_seconds(placements), **figures}
    report["seconds"] = round(time.monotonic() - started)
    report["load_average"] = [round(v, 2) for v in os.getloadavg()]
    report["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    return report


def validated(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse options the word and voice attacks cannot run with (exits, naming the option)."""
    if args.limit < 0:
        parser.error(f"--limit {args.limit}: must be 0 (all) or more")
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: must be at least 1")
    try:
        conditions_of(args)
    except (AttackError, StreamError) as error:
        parser.error(str(error))
