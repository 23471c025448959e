"""``barkwatch-train privacy``: what an attacker gets of speech from the wire.

    barkwatch-train privacy --corpus ../shared/corpus/extra --out privacy.json
    barkwatch-train privacy --attack words --corpus ../shared/corpus/words --floor 35 --out w.json
    barkwatch-train privacy --attack voices --corpus ../shared/corpus/extra --out v.json

``--attack words`` and ``--attack voices`` (issue 34): which digit was said and who said it,
from the frames of a continuous 48 kHz stream (:mod:`training.privacy_attacks`). The default,
``--attack rebuild``, is issue 24's STOI test:

Reads the corpus's speech clips (manifest label ``speech``; ``group`` is the voice), computes
what v1 and v2 carry for each (:mod:`training.privacy`), trains the learned attack on the
voices not held out (:mod:`training.privacy_net`), rebuilds every held-out clip with every
attack and reports STOI (mean, median, highest) per attack. Two references put the numbers in
scale: white noise (nothing of the clip) and another voice's clip score what STOI gives to
sound that carries no speech of the original.
"""

from __future__ import annotations

import argparse
import json
import logging
import pickle
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.corpus import load_audio, read_manifest
from training.privacy import (
    STEP,
    V1Content,
    V2Content,
    WireV2,
    coarsened,
    laf_deconvolved,
    long_term_power,
    power_to_audio,
    rebuild_from_bands,
    rebuild_from_envelope,
    rebuild_from_mel,
    stoi,
    v1_content,
)
from training.privacy_attacks import add_recognition_arguments, run_recognition, validated
from training.privacy_net import FIELDS, AttackInputs, train_attack

log = logging.getLogger(__name__)

# Voices kept out of the learned attack's training; tests/fixtures' clip is Allison's voice.
HELD_OUT_VOICES = (
    "asterisk:en_US_f_Allison",
    "asterisk:it_IT_m_Carlo",
    "prompt:fr:Armelle Desj",
    "kajongg:de_female2",
)
COARSENING_STEPS = (5, 12, 25, 50)  # the envelope averaged over 100 ms, 240 ms, 0.5 s, 1 s


@dataclass(frozen=True)
class SpeechItem:
    clip_id: str
    voice: str
    samples: np.ndarray
    v1: V1Content
    v2: V2Content


def speech_items(corpus: Path, limit: int = 0, cache: Path | None = None,
                 gated: bool = False) -> list[SpeechItem]:  # fmt: skip
    """Every speech clip of the corpus with what v1 and v2 carry for it (``gated``: what the
    current wire sends in v2's place, :class:`~training.privacy.WireV2`); with ``cache``, read
    from that file when it exists (a pickle this command wrote: trust only your own), else
    written to it."""
    if cache is not None and cache.is_file():
        with cache.open("rb") as file:
            cached: list[SpeechItem] = pickle.load(file)
        log.info("wire content of %d speech clips from %s", len(cached), cache)
        return cached
    clips = [clip for clip in read_manifest(corpus) if clip.label == "speech"]
    if not clips:
        raise ValueError(f"{corpus}/manifest.csv: no clip labelled 'speech'")
    if limit:
        clips = clips[:: max(1, len(clips) // limit)][:limit]
    wire = WireV2(gated=gated)
    items = []
    for number, clip in enumerate(clips, 1):
        samples = load_audio(clip.path)
        if samples.size < 2 * STEP * 25:
            continue  # under half a second: too short for STOI's 384 ms segments
        items.append(SpeechItem(clip.clip_id, clip.group, samples, v1_content(samples),
                                wire.content(samples)))  # fmt: skip
        if number % 50 == 0:
            log.info("wire content of %d/%d speech clips", number, len(clips))
    if cache is not None:
        with cache.open("wb") as file:
            pickle.dump(items, file)
    return items


def _scores(items: list[SpeechItem], rebuilt: list[np.ndarray]) -> dict[str, float]:
    """STOI and ESTOI of the rebuilt clips: mean, median, highest."""
    out: dict[str, float] = {"clips": len(items)}
    for metric, extended in (("stoi", False), ("estoi", True)):
        values = np.array(
            [stoi(it.samples, r, extended) for it, r in zip(items, rebuilt, strict=True)]
        )
        out[f"{metric}_mean"] = round(float(values.mean()), 3)
        out[f"{metric}_median"] = round(float(np.median(values)), 3)
        out[f"{metric}_max"] = round(float(values.max()), 3)
    return out


Attack = Callable[[SpeechItem, int], np.ndarray]


def signal_attacks() -> dict[str, Attack]:
    """The signal-processing attacks (and the references), by name."""
    attacks: dict[str, Attack] = {
        "reference: white noise": lambda item, seed: np.random.default_rng(seed).normal(
            0.0, 1.0, item.samples.size
        ),
        "v1 mel, Griffin-Lim at the wire's 20 ms hop (issue baseline)": lambda item, seed: (
            rebuild_from_mel(item.v1.mel_db, item.samples.size, seed=seed, hop=STEP)
        ),
        "v1 mel, Griffin-Lim on a 5 ms grid": lambda item, seed: rebuild_from_mel(
            item.v1.mel_db, item.samples.size, seed=seed
        ),
        "v2 bands (1 s), Griffin-Lim": lambda item, seed: rebuild_from_bands(
            item.v2, item.samples.size, seed
        ),
        "v2 bands shaped by laeq_s (0.5 s blocks, as sent), Griffin-Lim": lambda item, seed: (
            rebuild_from_envelope(item.v2, item.samples.size, seed)
        ),
        "v2 bands shaped by laf_s (0.5 s block maxima, as sent), Griffin-Lim": lambda item, seed: (
            rebuild_from_envelope(
                item.v2, item.samples.size, seed, envelope_db=item.v2.laf_steps_db
            )
        ),
        "v2 bands shaped by laf_s with F weighting undone, Griffin-Lim": lambda item, seed: (
            rebuild_from_envelope(
                item.v2, item.samples.size, seed, envelope_db=laf_deconvolved(item.v2.laf_steps_db)
            )
        ),
        "reference: noise with the clip's long-term spectrum (no time course)": lambda item, seed: (
            power_to_audio(*long_term_power(item.v2), item.samples.size, seed)
        ),
    }
    for steps in COARSENING_STEPS:
        attacks[f"fix: bands shaped by laeq over {steps * 20} ms, Griffin-Lim"] = _coarse(steps)
    return attacks


def _coarse(steps: int) -> Attack:
    """The band-envelope vocoder on ``laeq_s`` averaged over ``steps`` steps (a coarser wire)."""

    def attack(item: SpeechItem, seed: int) -> np.ndarray:
        envelope = coarsened(item.v2.laeq_steps_db, steps)
        return rebuild_from_envelope(item.v2, item.samples.size, seed, envelope_db=envelope)

    return attack


def evaluate(
    items: list[SpeechItem], held_out: tuple[str, ...], train_steps: int, seed: int,
    learned: list[AttackInputs], signal: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """STOI per attack on the held-out voices' clips."""
    test = [item for item in items if item.voice in held_out]
    train = [item for item in items if item.voice not in held_out]
    if not test or not train:
        raise ValueError(f"held-out voices {held_out} leave {len(train)} training and "
                         f"{len(test)} test clips: both must be non-empty")  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name, attack in (signal_attacks() if signal else {}).items():
        results[name] = _scores(test, [attack(it, seed) for it in test])
        log.info("%s: %s", name, results[name])
    others = [test[(i + 1) % len(test)].samples for i in range(len(test))]
    results["reference: another voice's clip"] = _scores(
        test, [np.resize(other, it.samples.size) for it, other in zip(test, others, strict=True)]
    )
    for inputs in learned:
        started = time.monotonic()
        trained = train_attack([it.v2 for it in train], [it.v1.mel_db for it in train], inputs,
                               steps=train_steps, seed=seed)  # fmt: skip
        name = f"learned: {'+'.join(inputs.fields)}" + (
            f", envelope over {inputs.envelope_steps * 20} ms" if inputs.envelope_steps > 1 else ""
        )
        results[name] = _scores(test, [
            rebuild_from_mel(trained.predict_mel(it.v2), it.samples.size, seed=seed) for it in test
        ])  # fmt: skip
        results[name]["train_seconds"] = round(time.monotonic() - started)
        log.info("%s: %s", name, results[name])
    return {
        "held_out_voices": list(held_out),
        "train_clips": len(train),
        "test_clips": len(test),
        "train_voices": len({it.voice for it in train}),
        "train_steps": train_steps,
        "seed": seed,
        "scores": results,
    }


def add_privacy_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "privacy", help="what an attacker recovers of speech from the wire: waveforms (STOI), "
        "words, voices (issues 24 and 34)",
        description="--attack rebuild (default): rebuild the corpus's speech from what wire v1 "
        "and v2 carry (Griffin-Lim, a band-envelope vocoder, a network trained on other "
        "voices) and report STOI against the originals on held-out voices. --attack words / "
        "voices: recognise spoken digits (leave one speaker out) or speakers (on words unseen "
        "in training) from the frames the installed sensor and wire send for a continuous "
        "48 kHz stream, per group of wire fields, with each figure's chance level.",
    )  # fmt: skip
    parser.add_argument(
        "--attack", choices=("rebuild", "words", "voices"), default="rebuild",
        help="rebuild: waveforms from the wire, scored by STOI (the corpus's 'speech' clips); "
        "words: which spoken digit (--corpus words/); voices: which speaker (--corpus words/ "
        "for its 6 speakers, or extra/ for the one-channel voices of --voices)",
    )  # fmt: skip
    parser.add_argument(
        "--corpus",
        type=Path,
        required=True,
        help="corpus folder with a manifest.csv: clips labelled 'speech' (rebuild, voices), "
        "or the spoken digits' words/ (words, voices)",
    )
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--held-out", action="append", default=[], metavar="VOICE",
                        help="a voice (manifest group) kept out of training (repeatable; "
                        f"default {', '.join(HELD_OUT_VOICES)})")  # fmt: skip
    parser.add_argument(
        "--train-steps",
        type=int,
        default=1200,
        help="optimiser steps of each learned attack (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed (default %(default)s)")
    parser.add_argument(
        "--learned",
        action="append",
        default=[],
        metavar="FIELDS[@STEPS]",
        help="a learned attack: v2 fields joined by '+' from "
        f"{', '.join(FIELDS)}, optionally '@N' to coarsen the envelope over N "
        "20 ms steps (repeatable; default: all fields, and all fields @25)",
    )
    parser.add_argument("--limit", type=int, default=0,
                        help="use about this many clips, every k-th of the manifest (0: all)")
    parser.add_argument(
        "--learned-only",
        action="store_true",
        help="only the learned attacks (skip Griffin-Lim and the references)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="FILE",
        help="rebuild: keep the clips' wire content in FILE and reuse it on the next run",
    )
    parser.add_argument(
        "--wire", choices=("v2", "current"), default="v2",
        help="rebuild: from what v2 sent (every field of every second; default) or from what "
        "the installed sensor's wire sends, its speech gate deciding each second",
    )  # fmt: skip
    add_recognition_arguments(parser)
    return parser


def _learned_inputs(parser: argparse.ArgumentParser, specs: list[str]) -> list[AttackInputs]:
    out = []
    for spec in specs or ["+".join(FIELDS), "+".join(FIELDS) + "@25"]:
        fields, _, steps = spec.partition("@")
        try:
            out.append(AttackInputs(tuple(fields.split("+")), int(steps or 1)))
        except ValueError as error:
            parser.error(f"--learned {spec!r}: {error}")
    return out


def run_privacy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("sensor.frames").setLevel(logging.ERROR)  # 16 kHz corpus: known
    if not (args.corpus / "manifest.csv").is_file():
        parser.error(f"{args.corpus}/manifest.csv not found")
    if args.attack != "rebuild":
        return _run_recognition(args, parser)
    if args.train_steps < 1:
        parser.error(f"--train-steps {args.train_steps}: must be at least 1")
    learned = _learned_inputs(parser, args.learned)
    try:
        items = speech_items(args.corpus, args.limit, args.cache, gated=args.wire == "current")
        report = {"wire": "v2" if args.wire == "v2" else "the current wire as sent (gated): "
                  "the rows named v2 read its content", **evaluate(
            items, tuple(args.held_out) or HELD_OUT_VOICES, args.train_steps, args.seed,
            learned, signal=not args.learned_only,
        )}  # fmt: skip
    except ValueError as error:  # no speech, or a split that leaves a side empty
        parser.error(str(error))
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    log.info("privacy figures:\n%s", text)
    return 0


def _run_recognition(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from analyzer.cli.progress import progress_bar

    validated(args, parser)
    try:
        with progress_bar("sensor and wire", "s", quiet=False) as progress:
            report = {"command": shlex.join(["barkwatch-train", *sys.argv[1:]])
                      if Path(sys.argv[0]).name == "barkwatch-train" else None,
                      **run_recognition(args, progress)}  # fmt: skip
    except ValueError as error:  # a corpus or split the attack cannot use
        parser.error(str(error))
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    log.info("%s attack:\n%s", args.attack, text)
    return 0
