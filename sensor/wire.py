"""Wire format v4: one msgpack map per one-second frame, arrays as packed little-endian numbers.

v4 (issue 34) is what the speech gate (:mod:`sensor.gate`) lets leave the sensor: the frame of a
second with dog activity (``g`` = ``"dog"``) carries what the analyzer needs for the event and
its level 100 ft away — the levels, the per-second third-octave bands, the 0.5 s envelopes, the
CNN's 20 ms dog score and the dog head's score per YAMNet patch (``pd``, computed on the sensor
by :mod:`sensor.dog_head`); a second only a candidate's score reaches, where no one speaks
(``g`` = ``"scores"``, with the sensor's ``[privacy] candidate_scores``), carries the dog scores
and the A-weighted levels, no spectrum; every other second (``g`` = ``"levels"``: speech, or
neither) carries the A-weighted levels a sound level meter shows, and nothing else. YAMNet's
embeddings and class scores never leave the sensor (v3 carried them in dog seconds, and spectra
in every second without speech: words were still told apart from them, docs/PRIVACY.md). The
audibility estimate's background comes as statistics every 10 s (``bg``: per band, the L90 over
the bark-free seconds of the last ten minutes, :mod:`sensor.gate`), in whichever frame is next.
A field a frame's gate withholds is refused if present; decoding fills it as nothing found
(no bands, no patches, dog score 0, LCeq and LZeq not measured: NaN; a ``"scores"`` frame's
envelopes hold its LAeq and LAFmax). An analyzer that knows only ``dog`` and ``levels`` refuses
``scores`` frames and counts them: upgrade analyzers before sensors. v1, v2 and v3 are refused
with a message that says the sensor must be upgraded.

The sensor owns this format; the analyzer imports it. Every field is validated on decode (and
before encoding, so a sensor never sends what an analyzer refuses) and an error names the
field and what was wrong with it. Keys are short to keep frames small.

The two broadband envelopes are coarse on purpose: at 20 ms they carried speech's syllable
rhythm (a band-envelope vocoder rebuilt held-out voices at STOI 0.61 against noise's 0.44;
docs/PRIVACY.md), so ``laeq_s`` and ``laf_s`` come one per ``env_hop`` (0.5 s, at which both
attacks score at the noise reference) while the CNN's ``dog_s`` keeps its 20 ms steps. A block
covers ``env_hop / hop`` steps (the last one of a frame may be shorter); ``Frame.laeq_steps_db``
and ``Frame.laf_steps_db`` hold each block's value over its steps for the event tracker.

Which patches a frame carries: a sensor sends frame k once the CNN has scored all its steps
(it looks 0.64 s ahead, so one second after its end), with every YAMNet patch completed by
then and not sent before, in order. Patch i of a frame starts at ``p0 + i * 0.48 s``
(``PATCH_HOP_NS``) and lasts 0.96 s; its scores describe 16 kHz audio resampled from the
capture (``sensor.resample``, ``sensor.yamnet_features``).

===========  =========  ===========================================================
key          type       meaning (``*``: dog frames only; ``+``: dog and scores frames)
===========  =========  ===========================================================
``v``        int        schema version, always 4 (1 to 3 are refused: upgrade the sensor)
``g``        str        the speech gate: ``dog`` (everything below), ``scores`` or ``levels``
``dev``      str        device id, ``[a-z0-9][a-z0-9_-]{0,63}`` (at most 64 characters)
``seq``      int        sequence number, per device, never reused (survives restarts)
``t``        int        capture time of the frame's first sample, ns since the Unix epoch (UTC)
``sr``       int        sample rate of the capture, Hz
``n``        int        number of samples in the frame (one second: ``sr``)
``fs_db``    float      calibration: the dB SPL that an RMS of digital full scale reads
``cal``      str        calibration date (ISO 8601) or ``""``, at most 64 printable characters
``la``       float      LAeq over the frame, dB
``lc``       float      ``*`` LCeq over the frame, dB
``lz``       float      ``*`` LZeq over the frame, dB
``lafmax``   float      LAFmax over the frame, dB
``lafmin``   float      LAFmin over the frame, dB
``lasmax``   float      LASmax over the frame, dB
``l10``      float      LAF10 (exceeded 10 % of the time) over the ``pct_s`` ending here, dB
``l50``      float      LAF50, dB
``l90``      float      LAF90 (background), dB
``pct_s``    float      seconds of LAF samples behind the percentiles (up to the window)
``clip``     int        number of clipped samples in the frame
``dc``       float      DC offset removed from the frame, full-scale units
``under``    bool       LAeq within the margin of the microphone's noise floor
``hop``      float      step of ``dog_s``, seconds (0.02)
``mv``       str        versions of the networks behind ``dog_s``, ``pd`` and ``dg``
``b0``       int        ``*`` IEC 61260-1 index x of the first third-octave band,
                        fm = 1000*10**(x/10)
``bands``    bytes      ``*`` float32 band levels (Leq over the frame, Z-weighted, dB)
``env_hop``  float      ``*`` block of ``laeq_s``/``laf_s``, seconds (0.5; a whole number of
                        ``hop``, at least 0.5: finer envelopes carry speech)
``laeq_s``   bytes      ``*`` float16 LAeq per block, dB (power mean of the block's steps)
``laf_s``    bytes      ``*`` float16 LAF (F time-weighted, A-weighted) maximum per block, dB
                        (so the frame's and an event's LAFmax stay exact, IEC 61672-1)
``dog_s``    bytes      ``+`` float16 dog score of the small CNN per step, 0..1
``p0``       int        ``+`` capture time of the first sample of the first patch below, ns
``pd``       bytes      ``+`` float16 dog score per patch, 0..1, of the dog head the sensor runs
                        on YAMNet's embedding and class scores (``models/dog_head.npz``)
``dg``       bytes      ``+`` optional: float16 dog score per patch, 0..1, of the fine-tuned
                        network the sensor runs beside YAMNet (``models/dog_yamnet.onnx``,
                        issue 39), one per value of ``pd``; absent from a YAMNet-only sensor
``cstep``    int        optional: the sensor's wall clock stepped by this many ns against
                        the sample clock since the previous frame (NTP correcting it);
                        absent when it did not (capture time is unaffected: sample count)
``bg_t``     int        optional, with the three below: start of the span the background
                        statistics describe, ns (the oldest second behind them)
``bg_n``     int        bark-free seconds of the span behind them (1..3600)
``bg_b0``    int        band index of the first value of ``bg`` (as ``b0``)
``bg``       bytes      float32 L90 of each band's 1 s Leq over those seconds, dB
``br``       float/nil  ``*`` optional, with ``bu``: the bark's compass bearing from the
                        sensor's microphone array, degrees clockwise from north, [0, 360);
                        nil when the array found none (diffuse, scattered, too short);
                        absent from a sensor without an array (issue 36)
``bu``       float/nil  ``*`` half-width of the bearing's interval, degrees, (0, 180]; nil
                        exactly when ``br`` is
===========  =========  ===========================================================
"""

from __future__ import annotations

import gc
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import numpy as np

from sensor.errors import WireError, WireReason

SCHEMA_VERSION = 4
# On the wire: a dog second's frame, or a frame of levels only. On the sensor the gate tells a
# second with speech from a quiet one (the quiet ones make the background statistics); both
# leave as "levels", so the stream does not say when someone spoke.
GATE_DOG, GATE_LEVELS = "dog", "levels"
GATE_QUIET, GATE_SPEECH = "quiet", "speech"
# A candidate's second where no one speaks (sensor.gate, [privacy] candidate_scores): the dog
# scores and the A-weighted levels, no spectrum.
GATE_SCORES = "scores"
GATES = (GATE_DOG, GATE_SCORES, GATE_LEVELS)
SENSOR_GATES = (GATE_DOG, GATE_SCORES, GATE_QUIET, GATE_SPEECH, GATE_LEVELS)
# The topic tree keeps its v1 name: topics, ACLs and retained status did not change, and a
# sensor not yet upgraded then still reaches the analyzer, which refuses and counts its frames
# (reason "version") instead of never seeing them.
TOPIC_ROOT = "barkwatch/v1"
MAX_PAYLOAD_BYTES = 64 * 1024
# \Z, not $: with re.match, $ also matches before a trailing newline ("dev-1\n").
DEVICE_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\Z")
# The longest ISO 8601 form (2026-12-01T10:15:30.123456789+05:30) has 35 characters; the
# bound keeps every InfluxDB point small (a 58,000-character date once stalled all writes).
MAX_CALIBRATION_CHARS = 64
SUPPORTED_SAMPLE_RATES = (16000, 32000, 44100, 48000)
MAX_BANDS = 43
MAX_STEPS = 200
EMBEDDING_SIZE = 1024  # YAMNet's embedding (sensor.yamnet_network)
N_CLASSES = 521  # AudioSet classes of YAMNet's output
MAX_PATCHES = 8  # normally 2 or 3 per frame (one each 0.48 s), a few more at a stream's end
PATCH_HOP_NS = 480_000_000  # YAMNet's patch hop, 0.48 s (sensor.yamnet_features)
MAX_EMBEDDING = 1000.0  # a mean of ReLU outputs: >= 0; YAMNet's stay under about 10
MAX_VERSION_CHARS = 128
# The envelopes' block: 0.5 s brings both envelope attacks to the noise reference, 0.24 s
# nearly (0.45 against 0.44), 0.1 s does not (0.52) (docs/PRIVACY.md); the decoder refuses finer.
ENVELOPE_HOP_S = 0.5
MIN_ENVELOPE_HOP_S = 0.5
MAX_ENVELOPE_HOP_S = 4.0  # a frame's longest span ('n' up to 4 s)
MAX_MAP_KEYS = 64  # a frame has 22 to 40 fields; a map on the wire with more than 64 is refused
MAX_BACKGROUND_SECONDS = 3600


def frame_topic(device_id: str) -> str:
    """Topic a device publishes its frames on."""
    return f"{TOPIC_ROOT}/frames/{device_id}"


def status_topic(device_id: str) -> str:
    """Retained online/offline topic, driven by the MQTT Last Will."""
    return f"{TOPIC_ROOT}/status/{device_id}"


def heartbeat_topic(device_id: str) -> str:
    """Topic of the periodic JSON heartbeat with the sensor's counters."""
    return f"{TOPIC_ROOT}/heartbeat/{device_id}"


def device_from_topic(topic: str) -> tuple[str, str]:
    """Split ``barkwatch/v1/<kind>/<device>`` into (kind, device); raise WireError otherwise."""
    parts = topic.split("/")
    if len(parts) != 4 or "/".join(parts[:2]) != TOPIC_ROOT:
        raise WireError(f"topic {_shown(topic)} is not of the form {TOPIC_ROOT}/<kind>/<device>",
                        WireReason.BAD_TOPIC)
    kind, device = parts[2], parts[3]
    if not DEVICE_ID_PATTERN.match(device):
        raise WireError(
            f"topic {_shown(topic)}: device id {_shown(device)} is not a valid device id",
            WireReason.BAD_TOPIC,
        )
    return kind, device


@dataclass(frozen=True)
class Frame:
    """One second of calibrated measurements and dog scores from one device.

    Levels are dB re 20 µPa. Arrays are float32 in memory; the wire stores the short-time
    series, scores and embeddings as float16 (0.06 dB resolution near 100 dB, 0.0005 near a
    score of 1). ``dog_steps`` has one score per ``hop_s``; ``laeq_blocks_db`` and
    ``laf_blocks_db`` one level per ``envelope_hop_s`` block of those steps (the last block may
    cover fewer). ``patch_head_scores`` (k) are the dog head's scores of the k patches starting
    at ``patch_start_ns`` and every ``PATCH_HOP_NS`` after it; ``embeddings`` (k x 1024) and
    ``class_scores`` (k x 521), YAMNet's outputs behind them, stay on the sensor (a decoded
    frame has none: 0 rows) and serve training and evaluation in memory. A decoded ``"levels"``
    frame has no bands, no patches, dog score 0 and NaN for LCeq and LZeq (not sent); a decoded
    ``"scores"`` frame the same but with its dog scores and patches.
    """

    device_id: str
    seq: int
    capture_ns: int
    sample_rate: int
    n_samples: int
    full_scale_db: float
    calibration_date: str
    laeq_db: float
    lceq_db: float
    lzeq_db: float
    lafmax_db: float
    lafmin_db: float
    lasmax_db: float
    laf10_db: float
    laf50_db: float
    laf90_db: float
    percentile_window_s: float
    clipped_samples: int
    dc_offset: float
    under_range: bool
    band_first_index: int
    bands_db: np.ndarray = field(repr=False)
    hop_s: float
    envelope_hop_s: float
    laeq_blocks_db: np.ndarray = field(repr=False)
    laf_blocks_db: np.ndarray = field(repr=False)
    dog_steps: np.ndarray = field(repr=False)
    patch_start_ns: int
    embeddings: np.ndarray = field(repr=False)
    class_scores: np.ndarray = field(repr=False)
    patch_head_scores: np.ndarray = field(repr=False)
    model_versions: str
    clock_step_ns: int = 0
    # the fine-tuned network's dog score per patch (``dg``), None from a YAMNet-only sensor
    patch_dog_scores: np.ndarray | None = field(default=None, repr=False)
    # what the frame carries on the wire (``g``, :mod:`sensor.gate`): everything (GATE_DOG),
    # the dog scores and A-weighted levels (GATE_SCORES) or levels only (GATE_LEVELS; on the
    # sensor GATE_QUIET or GATE_SPEECH, sent as levels)
    gate: str = "dog"
    # the background statistics of the minute before, in the frame that follows it (``bg``)
    background: BandBackground | None = field(default=None, repr=False)
    # a dog second's direction from the sensor's microphone array (issue 36, ``br``/``bu``):
    # compass degrees clockwise from north and the half-width of its interval; both None
    # when there is none. ``bearing_estimated``: the sensor has an array and estimated it
    # (False: no array, or not a dog second)
    bearing_deg: float | None = None
    bearing_uncertainty_deg: float | None = None
    bearing_estimated: bool = False

    @property
    def duration_s(self) -> float:
        """Length of the frame in seconds."""
        return self.n_samples / self.sample_rate

    @property
    def end_ns(self) -> int:
        """Capture time just after the frame's last sample, ns since the epoch."""
        return self.capture_ns + round(self.n_samples * 1e9 / self.sample_rate)

    def retimed(self, capture_ns: int) -> Frame:
        """The same frame captured at ``capture_ns``, its patches and background statistics
        moved with it (replay)."""
        shift = capture_ns - self.capture_ns
        background = self.background and replace(self.background,
                                                  start_ns=self.background.start_ns + shift)
        return replace(self, capture_ns=capture_ns, patch_start_ns=self.patch_start_ns + shift,
                       background=background)

    @property
    def steps_per_block(self) -> int:
        """Number of ``hop_s`` steps in one ``envelope_hop_s`` block."""
        return round(self.envelope_hop_s / self.hop_s)

    @property
    def laeq_steps_db(self) -> np.ndarray:
        """LAeq per ``dog_steps`` step: each step takes its block's value (0.5 s resolution)."""
        return steps_of_blocks(self.laeq_blocks_db, self.steps_per_block, self.dog_steps.size)

    @property
    def laf_steps_db(self) -> np.ndarray:
        """LAF maximum of each step's block, per ``dog_steps`` step (0.5 s resolution)."""
        return steps_of_blocks(self.laf_blocks_db, self.steps_per_block, self.dog_steps.size)

    @property
    def patch_starts_ns(self) -> np.ndarray:
        """Capture time of each patch's first sample, ns since the epoch."""
        return self.patch_start_ns + PATCH_HOP_NS * np.arange(len(self.patch_head_scores),
                                                              dtype=np.int64)

    @property
    def wire_gate(self) -> str:
        """What the frame leaves as: GATE_DOG, GATE_SCORES or GATE_LEVELS."""
        return self.gate if self.gate in (GATE_DOG, GATE_SCORES) else GATE_LEVELS


@dataclass(frozen=True, eq=False)
class BandBackground:
    """Per band, the L90 of the 1 s band Leq over the bark-free seconds of a span: the
    background of the audibility estimate, without the seconds themselves (``bg``)."""

    start_ns: int
    seconds: int
    first_index: int
    bands_db: np.ndarray = field(repr=False)


def blocks_needed(n_steps: int, steps_per_block: int) -> int:
    """Number of envelope blocks that cover ``n_steps`` steps (the last may be partial)."""
    return -(-n_steps // steps_per_block)


def steps_of_blocks(blocks: np.ndarray, steps_per_block: int, n_steps: int) -> np.ndarray:
    """Block values held over their steps: ``n_steps`` values, step k taking block
    ``k // steps_per_block`` (float32)."""
    values = np.repeat(np.asarray(blocks, dtype=np.float32), steps_per_block)
    return values[:n_steps]


def encode_frame(frame: Frame) -> bytes:
    """Serialise a frame to wire format v4 (what its gate allows); raise WireError for a frame
    the decoder refuses.

    The same checks as :func:`decode_frame` run on the payload before it is packed, so a
    sensor never queues a frame that every analyzer would drop.
    """
    with np.errstate(over="ignore"):  # a level beyond float16 becomes inf, refused below
        payload = _payload_of(frame)
    _validated(payload)
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    if len(data) > MAX_PAYLOAD_BYTES:
        raise WireError(
            f"frame of {len(data)} bytes exceeds the limit of {MAX_PAYLOAD_BYTES} bytes",
            WireReason.TOO_LARGE,
        )
    return data


def _full_payload_of(frame: Frame) -> dict[str, Any]:
    return {
        "v": SCHEMA_VERSION,
        "dev": frame.device_id,
        "seq": int(frame.seq),
        "t": int(frame.capture_ns),
        "sr": int(frame.sample_rate),
        "n": int(frame.n_samples),
        "fs_db": float(frame.full_scale_db),
        "cal": frame.calibration_date,
        "la": float(frame.laeq_db),
        "lc": float(frame.lceq_db),
        "lz": float(frame.lzeq_db),
        "lafmax": float(frame.lafmax_db),
        "lafmin": float(frame.lafmin_db),
        "lasmax": float(frame.lasmax_db),
        "l10": float(frame.laf10_db),
        "l50": float(frame.laf50_db),
        "l90": float(frame.laf90_db),
        "pct_s": float(frame.percentile_window_s),
        "clip": int(frame.clipped_samples),
        "dc": float(frame.dc_offset),
        "under": bool(frame.under_range),
        "b0": int(frame.band_first_index),
        "bands": np.asarray(frame.bands_db, dtype="<f4").tobytes(),
        "hop": float(frame.hop_s),
        "env_hop": float(frame.envelope_hop_s),
        "laeq_s": np.asarray(frame.laeq_blocks_db, dtype="<f2").tobytes(),
        "laf_s": np.asarray(frame.laf_blocks_db, dtype="<f2").tobytes(),
        "dog_s": np.asarray(frame.dog_steps, dtype="<f2").tobytes(),
        "p0": int(frame.patch_start_ns),
        "pd": _patch_scores_bytes(frame.patch_head_scores, frame, "pd"),
        "mv": frame.model_versions,
        "g": frame.wire_gate,
    } | ({"cstep": int(frame.clock_step_ns)} if frame.clock_step_ns else {}) | (
        {"dg": _patch_scores_bytes(frame.patch_dog_scores, frame, "dg")}
        if frame.patch_dog_scores is not None else {}) | _background_payload(frame.background) | (
        _bearing_payload(frame) if frame.bearing_estimated else {})


def _bearing_payload(frame: Frame) -> dict[str, Any]:
    if frame.bearing_deg is None or frame.bearing_uncertainty_deg is None:
        return {"br": None, "bu": None}
    bearing = float(frame.bearing_deg) % 360.0
    # (-1e-15) % 360.0 is 360.0 in floating point: north is 0
    return {"br": bearing if bearing < 360.0 else 0.0,
            "bu": float(frame.bearing_uncertainty_deg)}


def _background_payload(background: BandBackground | None) -> dict[str, Any]:
    if background is None:
        return {}
    return {"bg_t": int(background.start_ns), "bg_n": int(background.seconds),
            "bg_b0": int(background.first_index),
            "bg": np.asarray(background.bands_db, dtype="<f4").tobytes()}


def _payload_of(frame: Frame) -> dict[str, Any]:
    """The payload of ``frame`` with only what its gate lets leave the sensor."""
    if frame.gate not in SENSOR_GATES:
        raise WireError(f"field 'g': {_shown(frame.gate)} is not one of {', '.join(GATES)}",
                        WireReason.OUT_OF_RANGE)
    withheld = _WITHHELD[frame.wire_gate]
    return {key: value for key, value in _full_payload_of(frame).items()
            if key not in withheld}


def _patch_scores_bytes(values: np.ndarray | None, frame: Frame, name: str) -> bytes:
    scores = np.asarray(values, dtype="<f2")
    if scores.ndim != 1 or scores.size != len(frame.patch_head_scores):
        raise WireError(f"field {name!r}: {scores.shape} scores for "
                        f"{len(frame.patch_head_scores)} patches", WireReason.BAD_ARRAY)
    return scores.tobytes()


_FIELDS: dict[str, type | tuple[type, ...]] = {
    "v": int,
    "dev": str,
    "seq": int,
    "t": int,
    "sr": int,
    "n": int,
    "fs_db": (float, int),
    "cal": str,
    "la": (float, int),
    "lc": (float, int),
    "lz": (float, int),
    "lafmax": (float, int),
    "lafmin": (float, int),
    "lasmax": (float, int),
    "l10": (float, int),
    "l50": (float, int),
    "l90": (float, int),
    "pct_s": (float, int),
    "clip": int,
    "dc": (float, int),
    "under": bool,
    "b0": int,
    "bands": bytes,
    "hop": (float, int),
    "env_hop": (float, int),
    "laeq_s": bytes,
    "laf_s": bytes,
    "dog_s": bytes,
    "p0": int,
    "pd": bytes,
    "mv": str,
    "g": str,
}
_BACKGROUND_FIELDS: dict[str, type] = {"bg_t": int, "bg_n": int, "bg_b0": int, "bg": bytes}
_BEARING_FIELDS = ("br", "bu")  # float or nil (no bearing); checked in _bearing
_OPTIONAL_FIELDS: dict[str, type] = {"cstep": int, "dg": bytes} | _BACKGROUND_FIELDS
KNOWN_FIELDS = frozenset(_FIELDS) | frozenset(_OPTIONAL_FIELDS) | frozenset(_BEARING_FIELDS)
# What a "levels" frame keeps off the wire (wire v4, issue 34): everything but what a sound
# level meter's display shows with A-weighting. LCeq and LZeq go too: with LAeq they give the
# spectrum's tilt, from which digits were told apart 23 % of the time (chance 10 %; A-weighted
# levels alone 15 %, docs/PRIVACY.md).
# A "scores" frame keeps the dog scores too, and nothing of the spectrum: no bands, no LCeq or
# LZeq, no envelopes (and no bearing, which the array takes from whatever it hears loudest).
_SPECTRUM_FIELDS = frozenset({"lc", "lz", "b0", "bands", "env_hop", "laeq_s", "laf_s",
                              *_BEARING_FIELDS})
_WITHHELD: dict[str, frozenset[str]] = {
    GATE_DOG: frozenset(), GATE_SCORES: _SPECTRUM_FIELDS,
    GATE_LEVELS: _SPECTRUM_FIELDS | {"dog_s", "p0", "pd", "dg"}}
MAX_UNCERTAINTY_DEG = 180.0  # a half-width of half the circle or more tells nothing
MAX_CLOCK_STEP_NS = 10 * 365 * 86400 * 10**9  # a step beyond ten years is no clock's correction


def _array(raw: bytes, dtype: str, name: str, expected_len: int | None = None) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    if len(raw) % itemsize:
        raise WireError(f"field {name!r}: {len(raw)} bytes is not a whole number of {dtype}",
                        WireReason.BAD_ARRAY)
    values = np.frombuffer(raw, dtype=dtype).astype(np.float32)
    if expected_len is not None and values.size != expected_len:
        raise WireError(f"field {name!r}: {values.size} values, expected {expected_len}",
                        WireReason.BAD_ARRAY)
    if not np.all(np.isfinite(values)):
        raise WireError(f"field {name!r}: contains NaN or infinity", WireReason.NOT_FINITE)
    return values


def _bounded(values: np.ndarray, low: float, high: float, name: str, what: str) -> None:
    bad = np.flatnonzero((values < low) | (values > high))
    if bad.size:
        index = int(bad[0])
        raise WireError(f"field {name!r}: {what} {float(values.flat[index])} at index {index} "
                        f"is outside {low:g}..{high:g}", WireReason.OUT_OF_RANGE)


def _level(payload: dict[str, Any], key: str) -> float:
    value = float(payload[key])
    if not -150.0 <= value <= 250.0:  # NaN fails the comparison too
        raise WireError(f"field {key!r}: level {value} dB is outside -150..250 dB",
                        WireReason.OUT_OF_RANGE if math.isfinite(value) else WireReason.NOT_FINITE)
    return value


def _shown(value: object, limit: int = 40) -> str:
    """A short, single-line account of a value for an error message (payloads are hostile)."""
    if not isinstance(value, str | bytes | int | float | bool | type(None)):
        return f"a {type(value).__name__}"  # no repr: a container may nest hundreds deep
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def _key_shown(key: object) -> str:
    if isinstance(key, str) and key.isprintable() and len(key) <= 40:
        return key
    return _shown(key)


def decode_frame(data: bytes, max_bytes: int = MAX_PAYLOAD_BYTES) -> Frame:
    """Parse and validate a wire-format v4 frame; raise WireError naming what was wrong.

    Any byte string gives a Frame or a WireError, never another exception.
    """
    if len(data) > max_bytes:
        raise WireError(f"payload of {len(data)} bytes exceeds the limit of {max_bytes} bytes",
                        WireReason.TOO_LARGE)
    # The cyclic garbage collector is paused while unpacking: 64 KiB can hold 64,000 empty
    # containers, whose creation set off full collections of the analyzer's heap (280 ms per
    # payload, benchmarks/fuzz_payloads.py). msgpack builds no cycles: reference counting
    # frees it all.
    collecting = gc.isenabled()
    gc.disable()
    try:
        # strict_map_key: only str and bytes keys, so no crafted int keys collide in the dict.
        # msgpack bounds every length by the payload's own size, so no bomb allocates more;
        # max_map_len refuses a map of thousands of keys before they are made and sorted.
        payload = msgpack.unpackb(data, raw=False, strict_map_key=True,
                                  max_map_len=MAX_MAP_KEYS)
    except Exception as exc:  # msgpack raises several unrelated types
        raise WireError(f"payload is not valid msgpack: {type(exc).__name__}: {exc}",
                        WireReason.NOT_MSGPACK) from exc
    finally:
        if collecting:
            gc.enable()
    return _validated(payload)


# Why each earlier wire format is refused (docs/PRIVACY.md).
_RETIRED = {
    1: "it carried mel spectra that speech can be rebuilt from",
    2: "its per-second spectra, envelopes and embeddings let words and voices be recognised in "
       "seconds of speech",
    3: "its dog seconds carried YAMNet's embeddings and its other seconds spectra, from which "
       "spoken words were still told apart",
}


def _validated(payload: object) -> Frame:
    """Check a payload map field by field and build its Frame; raise WireError otherwise."""
    if not isinstance(payload, dict):
        raise WireError(f"payload is a {type(payload).__name__}, expected a map",
                        WireReason.NOT_A_MAP)
    version = payload.get("v")
    if type(version) is int and version in _RETIRED:
        raise WireError(
            f"field 'v': wire format v{version} is no longer accepted ({_RETIRED[version]}); "
            f"upgrade the sensor's software to wire format v{SCHEMA_VERSION}",
            WireReason.VERSION,
        )
    if type(version) is not int or version != SCHEMA_VERSION:
        raise WireError(
            f"field 'v': schema version {_shown(version)} is not supported "
            f"(expected {SCHEMA_VERSION})",
            WireReason.VERSION,
        )
    gate = payload.get("g")
    if not isinstance(gate, str) or gate not in GATES:
        raise WireError(f"field 'g': {_shown(gate)} is not one of {', '.join(GATES)}",
                        WireReason.MISSING_FIELD if gate is None else WireReason.OUT_OF_RANGE)
    withheld = _WITHHELD[gate]
    expected = {key: kind for key, kind in _FIELDS.items() if key not in withheld}
    missing = sorted(set(expected) - set(payload))
    if missing:
        raise WireError(f"missing field(s): {', '.join(missing)}", WireReason.MISSING_FIELD)
    sent = sorted(key for key in payload if isinstance(key, str) and key in withheld)
    if sent:
        raise WireError(f"field(s) {', '.join(sent)}: not sent in a {gate!r} frame (the "
                        "speech gate keeps them on the sensor)", WireReason.UNKNOWN_FIELD)
    for key in _OPTIONAL_FIELDS:
        if key in payload and type(payload[key]) is not _OPTIONAL_FIELDS[key]:
            raise WireError(f"field {key!r}: {type(payload[key]).__name__} is not the expected "
                            f"{_OPTIONAL_FIELDS[key].__name__}", WireReason.WRONG_TYPE)
    # Keys may be str or bytes (msgpack's str and bin): never compare them with each other.
    unknown = sorted(
        _key_shown(key)
        for key in payload
        if not isinstance(key, str) or key not in KNOWN_FIELDS
    )
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise WireError(f"unknown field(s): {', '.join(unknown[:5])}{more}",
                        WireReason.UNKNOWN_FIELD)
    for key, kind in expected.items():
        value = payload[key]
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
            kinds = kind if isinstance(kind, tuple) else (kind,)
            raise WireError(
                f"field {key!r}: {type(value).__name__} is not the expected "
                f"{' or '.join(k.__name__ for k in kinds)}",
                WireReason.WRONG_TYPE,
            )

    clock_step_ns = payload.get("cstep", 0)
    if not -MAX_CLOCK_STEP_NS <= clock_step_ns <= MAX_CLOCK_STEP_NS:
        raise WireError(f"field 'cstep': {clock_step_ns} ns is out of range",
                        WireReason.OUT_OF_RANGE)

    device_id = payload["dev"]
    if not DEVICE_ID_PATTERN.match(device_id):
        raise WireError(f"field 'dev': {_shown(device_id)} is not a valid device id",
                        WireReason.OUT_OF_RANGE)
    calibration_date = payload["cal"]
    if len(calibration_date) > MAX_CALIBRATION_CHARS:
        raise WireError(
            f"field 'cal': {len(calibration_date)} characters exceeds the limit of "
            f"{MAX_CALIBRATION_CHARS}",
            WireReason.OUT_OF_RANGE,
        )
    if not calibration_date.isprintable():
        raise WireError(f"field 'cal': {calibration_date!r} contains a control character",
                        WireReason.OUT_OF_RANGE)
    if not 0 <= payload["seq"] < 2**63:
        raise WireError(f"field 'seq': {payload['seq']} is out of range", WireReason.OUT_OF_RANGE)
    if not 0 <= payload["t"] < 2**63:
        raise WireError(f"field 't': {payload['t']} is not a capture time in ns",
                        WireReason.OUT_OF_RANGE)
    sample_rate = payload["sr"]
    if sample_rate not in SUPPORTED_SAMPLE_RATES:
        raise WireError(f"field 'sr': {sample_rate} Hz is not a supported sample rate",
                        WireReason.OUT_OF_RANGE)
    if not 0 < payload["n"] <= 4 * sample_rate:
        raise WireError(f"field 'n': {payload['n']} samples is out of range",
                        WireReason.OUT_OF_RANGE)
    if not 0 <= payload["clip"] <= payload["n"]:
        raise WireError(f"field 'clip': {payload['clip']} is out of range", WireReason.OUT_OF_RANGE)
    if not -20 <= payload.get("b0", 0) <= 13:
        raise WireError(f"field 'b0': band index {payload['b0']} is out of range",
                        WireReason.OUT_OF_RANGE)
    dc_offset = float(payload["dc"])
    if not -1.0 <= dc_offset <= 1.0:
        raise WireError(f"field 'dc': {dc_offset} is outside -1..1 (full scale)",
                        WireReason.OUT_OF_RANGE)
    if not 0.0 <= float(payload["pct_s"]) <= 3600.0:
        raise WireError(f"field 'pct_s': {payload['pct_s']} s is out of range",
                        WireReason.OUT_OF_RANGE)
    hop_s = float(payload["hop"])
    if not 0.001 <= hop_s <= 1.0:
        raise WireError(f"field 'hop': {hop_s} s is out of range", WireReason.OUT_OF_RANGE)
    background = _background(payload)
    if gate != GATE_DOG:
        return _without_spectrum(payload, gate, device_id, calibration_date, dc_offset, hop_s,
                                 clock_step_ns, background)
    dog_steps, head_scores, patch_dog_scores, patch_start_ns = _dog_scores(payload)
    bands, envelope_hop_s, laeq_blocks, laf_blocks = _spectrum(payload, dog_steps.size, hop_s)
    model_versions = _model_versions(payload)
    bearing_deg, bearing_uncertainty_deg, bearing_estimated = _bearing(payload)

    return Frame(
        device_id=device_id,
        seq=payload["seq"],
        capture_ns=payload["t"],
        sample_rate=sample_rate,
        n_samples=payload["n"],
        full_scale_db=float(payload["fs_db"]),
        calibration_date=calibration_date,
        laeq_db=_level(payload, "la"),
        lceq_db=_level(payload, "lc"),
        lzeq_db=_level(payload, "lz"),
        lafmax_db=_level(payload, "lafmax"),
        lafmin_db=_level(payload, "lafmin"),
        lasmax_db=_level(payload, "lasmax"),
        laf10_db=_level(payload, "l10"),
        laf50_db=_level(payload, "l50"),
        laf90_db=_level(payload, "l90"),
        percentile_window_s=float(payload["pct_s"]),
        clipped_samples=payload["clip"],
        dc_offset=dc_offset,
        under_range=payload["under"],
        band_first_index=payload["b0"],
        bands_db=bands,
        hop_s=hop_s,
        envelope_hop_s=envelope_hop_s,
        laeq_blocks_db=laeq_blocks,
        laf_blocks_db=laf_blocks,
        dog_steps=dog_steps,
        patch_start_ns=patch_start_ns,
        embeddings=np.zeros((0, EMBEDDING_SIZE), np.float32),
        class_scores=np.zeros((0, N_CLASSES), np.float32),
        patch_head_scores=head_scores,
        model_versions=model_versions,
        clock_step_ns=clock_step_ns,
        patch_dog_scores=patch_dog_scores,
        background=background,
        bearing_deg=bearing_deg,
        bearing_uncertainty_deg=bearing_uncertainty_deg,
        bearing_estimated=bearing_estimated,
    )


def _dog_scores(payload: dict[str, Any]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int]:
    """(``dog_s``, ``pd``, ``dg`` or None, ``p0``) of a frame that carries the dog scores."""
    dog_steps = _array(payload["dog_s"], "<f2", "dog_s")
    if not 0 < dog_steps.size <= MAX_STEPS:
        raise WireError(f"field 'dog_s': {dog_steps.size} steps is out of range",
                        WireReason.OUT_OF_RANGE)
    _bounded(dog_steps, 0.0, 1.0, "dog_s", "score")
    head_scores = _array(payload["pd"], "<f2", "pd")
    if head_scores.size > MAX_PATCHES:
        raise WireError(f"field 'pd': {head_scores.size} patches exceeds the limit of "
                        f"{MAX_PATCHES}", WireReason.OUT_OF_RANGE)
    _bounded(head_scores, 0.0, 1.0, "pd", "score")
    patch_dog_scores = None
    if "dg" in payload:
        patch_dog_scores = _array(payload["dg"], "<f2", "dg", head_scores.size)
        _bounded(patch_dog_scores, 0.0, 1.0, "dg", "score")
    patch_start_ns = payload["p0"]
    # A frame's patches start at most 2 s before it (those completed with the next second)
    # and within it; an empty list names the frame's own start.
    if not (payload["t"] - 2 * 10**9 <= patch_start_ns <= payload["t"] + 2 * 10**9
            and 0 <= patch_start_ns < 2**63 - MAX_PATCHES * PATCH_HOP_NS):
        raise WireError(f"field 'p0': {patch_start_ns} ns is not within 2 s of the frame's "
                        f"capture time {payload['t']} ns", WireReason.OUT_OF_RANGE)
    return dog_steps, head_scores, patch_dog_scores, patch_start_ns


def _bearing(payload: dict[str, Any]) -> tuple[float | None, float | None, bool]:
    """(bearing, uncertainty, estimated) of a dog frame: both fields or neither; both nil (no
    bearing) or both numbers in range."""
    present = [key for key in _BEARING_FIELDS if key in payload]
    if not present:
        return None, None, False
    if len(present) == 1:
        other = "bu" if present[0] == "br" else "br"
        raise WireError(f"field {other!r}: missing beside {present[0]!r} (a bearing comes with "
                        "its uncertainty)", WireReason.MISSING_FIELD)
    values = []
    for key in _BEARING_FIELDS:
        value = payload[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, float | int)):
            raise WireError(f"field {key!r}: {type(value).__name__} is not the expected float "
                            "or nil", WireReason.WRONG_TYPE)
        values.append(None if value is None else float(value))
    bearing, uncertainty = values
    if (bearing is None) != (uncertainty is None):
        raise WireError(f"fields 'br'/'bu': {_shown(payload['br'])} and {_shown(payload['bu'])}: "
                        "both nil (no bearing) or both numbers", WireReason.OUT_OF_RANGE)
    if bearing is not None and uncertainty is not None:
        if not 0.0 <= bearing < 360.0:
            raise WireError(f"field 'br': bearing {bearing} is outside 0..360 degrees",
                            WireReason.OUT_OF_RANGE if math.isfinite(bearing)
                            else WireReason.NOT_FINITE)
        if not 0.0 < uncertainty <= MAX_UNCERTAINTY_DEG:
            raise WireError(f"field 'bu': uncertainty {uncertainty} is outside 0..180 degrees "
                            "(more than 0)", WireReason.OUT_OF_RANGE if math.isfinite(
                                uncertainty) else WireReason.NOT_FINITE)
    return bearing, uncertainty, True


def _spectrum(payload: dict[str, Any], n_steps: int, hop_s: float
              ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """(bands, env_hop, LAeq blocks, LAF blocks) of a frame that carries them."""
    bands = _array(payload["bands"], "<f4", "bands")
    if not 0 < bands.size <= MAX_BANDS:
        raise WireError(f"field 'bands': {bands.size} bands is out of range",
                        WireReason.OUT_OF_RANGE)
    envelope_hop_s = float(payload["env_hop"])
    if not MIN_ENVELOPE_HOP_S <= envelope_hop_s <= MAX_ENVELOPE_HOP_S:
        why = " (a finer envelope carries speech)" if envelope_hop_s < MIN_ENVELOPE_HOP_S else ""
        raise WireError(
            f"field 'env_hop': {envelope_hop_s} s is outside {MIN_ENVELOPE_HOP_S:g}.."
            f"{MAX_ENVELOPE_HOP_S:g} s{why}",
            WireReason.OUT_OF_RANGE if math.isfinite(envelope_hop_s) else WireReason.NOT_FINITE,
        )
    steps_per_block = round(envelope_hop_s / hop_s)
    if abs(steps_per_block * hop_s - envelope_hop_s) > 1e-6 * envelope_hop_s:
        raise WireError(f"field 'env_hop': {envelope_hop_s} s is not a whole number of 'hop' "
                        f"({hop_s} s)", WireReason.OUT_OF_RANGE)
    n_blocks = blocks_needed(n_steps, steps_per_block)
    return (bands, envelope_hop_s, _array(payload["laeq_s"], "<f2", "laeq_s", n_blocks),
            _array(payload["laf_s"], "<f2", "laf_s", n_blocks))


def _background(payload: dict[str, Any]) -> BandBackground | None:
    """The minute's background statistics of a frame that has them (all four fields, or none)."""
    present = [key for key in _BACKGROUND_FIELDS if key in payload]
    if not present:
        return None
    if len(present) != len(_BACKGROUND_FIELDS):
        missing = sorted(set(_BACKGROUND_FIELDS) - set(present))
        raise WireError(f"field(s) {', '.join(missing)}: missing beside {', '.join(present)} "
                        "(the background statistics come as four fields)",
                        WireReason.MISSING_FIELD)
    if not 0 <= payload["bg_t"] <= payload["t"]:
        raise WireError(f"field 'bg_t': {payload['bg_t']} ns is not before the frame's capture "
                        f"time {payload['t']} ns", WireReason.OUT_OF_RANGE)
    if not 1 <= payload["bg_n"] <= MAX_BACKGROUND_SECONDS:
        raise WireError(f"field 'bg_n': {payload['bg_n']} seconds is outside "
                        f"1..{MAX_BACKGROUND_SECONDS}", WireReason.OUT_OF_RANGE)
    if not -20 <= payload["bg_b0"] <= 13:
        raise WireError(f"field 'bg_b0': band index {payload['bg_b0']} is out of range",
                        WireReason.OUT_OF_RANGE)
    bands = _array(payload["bg"], "<f4", "bg")
    if not 0 < bands.size <= MAX_BANDS:
        raise WireError(f"field 'bg': {bands.size} bands is out of range",
                        WireReason.OUT_OF_RANGE)
    _bounded(bands, -150.0, 250.0, "bg", "level")
    return BandBackground(payload["bg_t"], payload["bg_n"], payload["bg_b0"], bands)


def _without_spectrum(payload: dict[str, Any], gate: str, device_id: str, calibration_date: str,
                      dc_offset: float, hop_s: float, clock_step_ns: int,
                      background: BandBackground | None) -> Frame:
    """The Frame of a "levels" or "scores" frame: what was withheld stands in as nothing found —
    no bands, LCeq and LZeq NaN (not measured), the second's LAeq and LAFmax held over its
    envelope blocks, and in a "levels" frame no patches and a dog score of 0 every step — so the
    analyzer runs on it unchanged."""
    if gate == GATE_SCORES:
        dog_steps, head_scores, patch_dog_scores, patch_start_ns = _dog_scores(payload)
    else:
        n_steps = round(payload["n"] / payload["sr"] / hop_s)
        if not 0 < n_steps <= MAX_STEPS:
            raise WireError(f"fields 'n'/'hop': {n_steps} steps is out of range",
                            WireReason.OUT_OF_RANGE)
        dog_steps, head_scores = np.zeros(n_steps, np.float32), np.zeros(0, np.float32)
        patch_dog_scores, patch_start_ns = None, payload["t"]
    laeq, lafmax = _level(payload, "la"), _level(payload, "lafmax")
    steps_per_block = round(ENVELOPE_HOP_S / hop_s)
    n_blocks = blocks_needed(dog_steps.size, steps_per_block)
    model_versions = _model_versions(payload)
    return Frame(
        device_id=device_id, seq=payload["seq"], capture_ns=payload["t"],
        sample_rate=payload["sr"], n_samples=payload["n"],
        full_scale_db=float(payload["fs_db"]), calibration_date=calibration_date,
        laeq_db=laeq, lceq_db=math.nan, lzeq_db=math.nan,
        lafmax_db=lafmax, lafmin_db=_level(payload, "lafmin"),
        lasmax_db=_level(payload, "lasmax"), laf10_db=_level(payload, "l10"),
        laf50_db=_level(payload, "l50"), laf90_db=_level(payload, "l90"),
        percentile_window_s=float(payload["pct_s"]), clipped_samples=payload["clip"],
        dc_offset=dc_offset, under_range=payload["under"], band_first_index=0,
        bands_db=np.zeros(0, np.float32), hop_s=hop_s,
        envelope_hop_s=steps_per_block * hop_s,
        laeq_blocks_db=np.full(n_blocks, laeq, np.float32),
        laf_blocks_db=np.full(n_blocks, lafmax, np.float32),
        dog_steps=dog_steps, patch_start_ns=patch_start_ns,
        embeddings=np.zeros((0, EMBEDDING_SIZE), np.float32),
        class_scores=np.zeros((0, N_CLASSES), np.float32),
        patch_head_scores=head_scores, model_versions=model_versions,
        clock_step_ns=clock_step_ns, patch_dog_scores=patch_dog_scores, gate=gate,
        background=background,
    )


def _model_versions(payload: dict[str, Any]) -> str:
    """The frame's ``mv``: 1 to MAX_VERSION_CHARS printable characters."""
    model_versions: str = payload["mv"]
    if not 0 < len(model_versions) <= MAX_VERSION_CHARS or not model_versions.isprintable():
        raise WireError(f"field 'mv': {_shown(model_versions)} is not 1 to {MAX_VERSION_CHARS} "
                        "printable characters", WireReason.OUT_OF_RANGE)
    return model_versions
