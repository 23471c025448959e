"""The demo's scene: more than seven minutes of barking, made at run time from the bundled
recording, so the demo can show a finding, a case and a report without committing more audio.

``demo/example.flac`` (150 s, openly licensed: demo/LICENCES.md) is too short to hold the
continuous rule's episode (Glencoe section 701 subd. 5: "more than seven minutes
continuously"). The scene cuts the recording's annotated bark spans
(``example.annotations.csv``) and its bark-free background, and assembles, seeded so every run
makes the same samples: a lead of background; barks at gaps far under the 60 s continuity gap
for eight minutes; then a tail of background long enough for the live analyzer to seal the
finding. Nothing here is tuned to the detector: the gaps leave room for missed barks.

The scene is mixed and replayed at 48 kHz, the rate a deployed sensor captures at, so the
demo measures with the settings a city uses (A and C weighting within IEC 61672-1 class 1
to 16 kHz, bands to 10 kHz) and no class-1 warning. The bundled recording is 16 kHz (the
training corpus's rate): it is upsampled first with libsoxr's band-limited "very high
quality" filter, which adds no content of its own, so the scene honestly carries nothing
above 8 kHz: the 8 kHz band holds only what the recording had up to 7.6 kHz, the 10 kHz band
only what its filter's skirt lets through from below. Against the same scene mixed at 16 kHz,
the whole scene's LAeq, LCeq and LZeq are unchanged (0.00 dB) and no frame's LAeq moves by
more than 0.13 dB (docs/MEASUREMENT.md, "The demo at 48 kHz").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

from analyzer.offline import read_annotations

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
DEMO_RECORDING = DEMO_DIR / "example.flac"
DEMO_ANNOTATIONS = DEMO_DIR / "example.annotations.csv"

SCENE_RATE_HZ = 48_000
"""The rate the scene is mixed and replayed at: the deployment capture rate (docs/MEASUREMENT.md,
"Why the capture rate matters")."""
SCENE_SEED = 20_261_201
LEAD_S = 20.0
# More than 420 s (subd. 5, seven minutes) by a minute, so a bark the detector misses at
# either end still leaves an episode over the limit.
BARKING_S = 480.0
# Between one bark's end and the next one's start. With the longest bundled bark (7.3 s) even
# two barks missed in a row leave a gap of 3 * 12 + 2 * 7.3 = 51 s, under the 60 s continuity
# gap (docs/RULES.md: "less than one minute of interruption").
BARK_GAP_S = (3.0, 12.0)
# The live analyzer seals a finding once capture time has passed its end by the continuity
# gap (60 s) plus the rules' reorder window (120 s): 200 s leaves 20 s to spare.
TAIL_S = 200.0
BACKGROUND_MARGIN_S = 2.0  # background is cut this far from any annotated bark
MIN_BACKGROUND_PIECE_S = 5.0
BED_CHUNK_S = (6.0, 20.0)
CROSSFADE_S = 1.0
EDGE_FADE_S = 0.02  # fades at a bark cut's ends, so a cut adds no click


class SceneError(ValueError):
    """The bundled material cannot make a scene (names the file and what was wrong)."""


@dataclass(frozen=True)
class Scene:
    """Mono samples (float32, full scale 1) and the bark spans placed in them, s."""

    samples: np.ndarray
    rate_hz: int
    bark_spans_s: tuple[tuple[float, float], ...]

    @property
    def duration_s(self) -> float:
        """Length, s."""
        return len(self.samples) / self.rate_hz

    @property
    def barking_s(self) -> float:
        """From the first bark's start to the last one's end, s."""
        return self.bark_spans_s[-1][1] - self.bark_spans_s[0][0]

    @property
    def longest_gap_s(self) -> float:
        """The longest gap between one placed bark's end and the next one's start, s."""
        spans = self.bark_spans_s
        return max(b[0] - a[1] for a, b in zip(spans, spans[1:], strict=False))


def bark_free_pieces(spans: list[tuple[float, float]], duration_s: float,
                     margin_s: float = BACKGROUND_MARGIN_S,
                     min_length_s: float = MIN_BACKGROUND_PIECE_S) -> list[tuple[float, float]]:
    """The stretches at least ``margin_s`` away from every span and at least ``min_length_s``
    long, s."""
    pieces, start = [], 0.0
    for onset, offset in sorted(spans):
        if onset - margin_s - start >= min_length_s:
            pieces.append((start, onset - margin_s))
        start = max(start, offset + margin_s)
    if duration_s - start >= min_length_s:
        pieces.append((start, duration_s))
    return pieces


def _equal_power_join(a: np.ndarray, b: np.ndarray, overlap: int) -> np.ndarray:
    if overlap == 0 or len(a) < overlap or len(b) < overlap:
        return np.concatenate([a, b])
    t = np.linspace(0.0, np.pi / 2, overlap, dtype=np.float64)
    mixed = a[-overlap:] * np.cos(t) + b[:overlap] * np.sin(t)
    return np.concatenate([a[:-overlap], mixed, b[overlap:]])


def background_bed(audio: np.ndarray, rate_hz: int, pieces: list[tuple[float, float]],
                   length_s: float, rng: np.random.Generator) -> np.ndarray:
    """``length_s`` of background: random chunks of the bark-free pieces joined with
    equal-power crossfades."""
    overlap = round(CROSSFADE_S * rate_hz)
    need = round(length_s * rate_hz)
    bed = np.zeros(0)
    while len(bed) < need:
        start_s, end_s = pieces[int(rng.integers(len(pieces)))]
        chunk_s = min(end_s - start_s, float(rng.uniform(*BED_CHUNK_S)))
        first_s = float(rng.uniform(start_s, end_s - chunk_s))
        first = round(first_s * rate_hz)
        bed = _equal_power_join(bed, audio[first:first + round(chunk_s * rate_hz)], overlap)
    return bed[:need]


def make_scene(audio: np.ndarray, rate_hz: int, spans: list[tuple[float, float]],
               seed: int = SCENE_SEED, lead_s: float = LEAD_S, barking_s: float = BARKING_S,
               tail_s: float = TAIL_S) -> Scene:
    """Background for ``lead_s``, then barks (the annotated spans, picked at random) at gaps
    drawn from :data:`BARK_GAP_S` until they span at least ``barking_s``, then ``tail_s`` of
    background. The same inputs and seed give the same samples."""
    if not spans:
        raise SceneError("the recording has no annotated bark span to cut")
    pieces = bark_free_pieces(spans, len(audio) / rate_hz)
    if not pieces:
        raise SceneError("the recording has no bark-free stretch of "
                         f"{MIN_BACKGROUND_PIECE_S:g} s to make background from")
    rng = np.random.default_rng(seed)
    cuts = [audio[round(a * rate_hz):round(b * rate_hz)] for a, b in spans]
    picks: list[tuple[int, int]] = []  # (first sample, cut)
    placed: list[tuple[float, float]] = []
    t_s = lead_s
    while not placed or placed[-1][1] - placed[0][0] < barking_s:
        pick = int(rng.integers(len(cuts)))
        picks.append((round(t_s * rate_hz), pick))
        placed.append((t_s, t_s + len(cuts[pick]) / rate_hz))
        t_s = placed[-1][1] + float(rng.uniform(*BARK_GAP_S))
    samples = background_bed(audio, rate_hz, pieces, placed[-1][1] + tail_s, rng)
    fade = round(EDGE_FADE_S * rate_hz)
    for first, pick in picks:
        cut = cuts[pick].copy()
        ramp = np.sin(np.linspace(0.0, np.pi / 2, min(fade, len(cut) // 2))) ** 2
        cut[:len(ramp)] *= ramp
        cut[len(cut) - len(ramp):] *= ramp[::-1]
        samples[first:first + len(cut)] += cut
    # The bundled mix peaks at -3 dBFS; a bark over a louder stretch of bed could pass full
    # scale, and a 16-bit file would clip it: scale the whole scene down just enough.
    peak = float(np.max(np.abs(samples)))
    if peak > 0.99:
        samples *= 0.99 / peak
    return Scene(samples.astype(np.float32), rate_hz, tuple(placed))


def upsample(audio: np.ndarray, rate_hz: int, to_rate_hz: int = SCENE_RATE_HZ) -> np.ndarray:
    """``audio`` (mono float64) at ``to_rate_hz``: libsoxr's band-limited resampler, "very
    high quality", linear phase. From 16 kHz: flat within 0.01 dB to 7.4 kHz, -3 dB at
    7.6 kHz, and the images of the input spectrum above 8 kHz more than 100 dB down
    (measured). Unchanged when the rates match; the length scales by the ratio of the rates."""
    if rate_hz == to_rate_hz:
        return audio
    return np.asarray(soxr.resample(audio, rate_hz, to_rate_hz, quality="VHQ"), dtype=np.float64)


def recording_rate_hz(recording: Path = DEMO_RECORDING) -> int:
    """The sample rate the recording was made at, Hz (the scene's sources carry nothing above
    half of it)."""
    try:
        return int(soundfile.info(str(recording)).samplerate)
    except (OSError, RuntimeError) as exc:
        raise SceneError(f"cannot read the demo recording {recording}: {exc}") from exc


def load_material(recording: Path = DEMO_RECORDING,
                  annotations: Path = DEMO_ANNOTATIONS,
                  rate_hz: int = SCENE_RATE_HZ) -> tuple[np.ndarray, int,
                                                         list[tuple[float, float]]]:
    """The bundled recording (mono float64, upsampled to ``rate_hz``), that rate and its
    annotated dog spans, s."""
    try:
        audio, file_rate_hz = soundfile.read(recording, dtype="float64", always_2d=True)
    except (OSError, RuntimeError) as exc:  # soundfile raises LibsndfileError (RuntimeError)
        raise SceneError(f"cannot read the demo recording {recording}: {exc}") from exc
    mono = upsample(audio.mean(axis=1), int(file_rate_hz), rate_hz)
    return mono, rate_hz, read_annotations(annotations)


def write_scene(scene: Scene, path: Path) -> Path:
    """Write the scene as 16-bit FLAC (the bundled recording's format); returns ``path``."""
    soundfile.write(path, scene.samples, scene.rate_hz, subtype="PCM_16")
    return path
