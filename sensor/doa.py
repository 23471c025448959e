"""Direction of arrival of a dog stretch on a microphone array: SRP-PHAT in the dog band
(issue 36, item 2).

The steered response power with the phase transform (SRP-PHAT; DiBiase, Silverman and
Brandstein, "Robust localization in reverberant rooms", in *Microphone Arrays*, Springer 2001)
is the sum over capsule pairs of the generalised cross-correlation with the phase transform
(GCC-PHAT; Knapp and Carter, IEEE Trans. ASSP 24(4), 1976), each pair's evaluated at the
time difference that a plane wave from the candidate direction would give. It is evaluated
here in the frequency domain, at the exact (fractional) delays, on a 2-degree grid of azimuths
in the board's plane: the same quantity as pyroomacoustics' ``SRP`` (tests/test_doa.py compares the
two), written over numpy because pyroomacoustics publishes no wheel for the Raspberry Pi's
aarch64 and would have to be compiled on every sensor.

Only the dog band is used (400-4000 Hz by default: a bark's energy; below, wind and traffic
rumble; above, the capsules' spacing aliases and little bark energy is left 10-60 m away).
STFT frames are weighted by how much their band power rises over the frame before (onset
weighting, after the precedence effect): a bark's onset arrives by the direct path before
the facade's or a fence's echo, and the gaps between barks carry no weight at all. Without
it, a facade 3-5 m behind the sensor pulled the median error at 20 dB SNR from 1.8 to 7
degrees and left half the stretches without a bearing (benchmarks/bearing_sim.py,
docs/BEARING.md). Within a frame each bin counts in the same way, by the share of its power
that is new (``bin_onsets``): a bark's harmonics start together, while the street's steady
noise between them and the echo of the frame before do not, so neither pulls the peak.

What is returned (:class:`Bearing`):

- the compass bearing of the pooled SRP's peak, the array's orientation applied;
- ``sharpness``: the pooled SRP's peak minus its median over azimuth. SRP-PHAT is normalised
  so that one plane wave whose every bin is new gives a peak of 1; a diffuse field gives a
  nearly flat response, and steady sound few new bins, so a low sharpness means no single
  direction dominates the onsets;
- ``spread_deg``: the circular standard deviation of the bearings of the stretch's sub-blocks
  (``block_s`` each), weighted by what each put into the pooled response (its onsets' weight
  times its bins' share of new power): barks from one dog agree; a field with no direction
  scatters;
- ``uncertainty_deg``: a half-width around the bearing: twice the spread, never below
  ``min_uncertainty_deg``. Not the spread's standard error: an echo biases every sub-block
  alike, and attribution must err in the owner's favour (docs/BEARING.md gives how often
  the error fell inside it);
- no bearing (``bearing_deg`` None, with ``reason``) for a single capsule, a stretch too short
  or too quiet for two sub-blocks, a low sharpness or a large spread.

Pure functions over numpy arrays; no I/O. Build a :class:`DoaPlan` once per array and sample
rate (:func:`plan_doa`), then call :func:`estimate_bearing` for each dog stretch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import scipy.fft

from sensor.array import ArraySettings

# Speed of sound at 20 degrees C, 101.325 kPa (ISO 9613-1's reference air gives 343.2 m/s).
SPEED_OF_SOUND_M_S = 343.0
DOG_BAND_HZ = (400.0, 4000.0)

NO_CAPSULES = "single capsule"
TOO_SHORT = "too short"
DIFFUSE = "diffuse"
SCATTERED = "scattered"


@dataclass(frozen=True)
class DoaOptions:
    """Parameters of the estimate; the defaults are the ones benchmarks/bearing_sim.py
    measured (docs/BEARING.md)."""

    low_hz: float = DOG_BAND_HZ[0]
    high_hz: float = DOG_BAND_HZ[1]
    frame_s: float = 0.02  # STFT frame (rounded to a power of two samples), no overlap
    onset_ratio: float = 1.5  # a frame counts by how far its power rises over this x the last
    block_s: float = 0.06  # sub-block for the spread across the stretch
    grid_step_deg: float = 2.0  # the peak is refined by a parabola through its neighbours
    speed_of_sound_m_s: float = SPEED_OF_SOUND_M_S
    # Each bin of each frame counts by the share of its power over onset_ratio x its power in
    # the frame before (and its background); False: every bin alike, as before (min_sharpness
    # was then 0.15), kept for comparisons (benchmarks/bearing_sim.py --compare).
    bin_onsets: bool = True
    # Below this sharpness no direction dominates the onsets. With bin_onsets: independent
    # noise on each capsule gives under 0.01; 36 uncorrelated sources all round, in bursts,
    # 0.04; one steady plane wave 0.26; the same in bursts, or a synthetic bark with a
    # facade 4 m behind the array, 0.75-0.85 (tests/test_doa.py). At 0.05 one of 720
    # simulated events of an outside dog (4 dB, sharpness 0.0597, two sub-blocks 30 degrees
    # off) counted as from the premises (docs/BEARING.md).
    min_sharpness: float = 0.06
    max_spread_deg: float = 40.0  # sub-blocks scattered more than this: no bearing
    min_uncertainty_deg: float = 2.0  # the grid, the far-field model, the capsules' tolerances
    # The uncertainty is this many times the sub-blocks' spread: once covered the error in
    # 41 % of simulated stretches, twice in 66 % (docs/BEARING.md).
    uncertainty_spreads: float = 2.0
    min_block_share: float = 0.05  # sub-blocks with less of the stretch's weight are not used

    def __post_init__(self) -> None:
        if not 0 < self.low_hz < self.high_hz:
            raise ValueError(f"DoaOptions: band {self.low_hz}-{self.high_hz} Hz is empty")
        for name in ("frame_s", "block_s", "grid_step_deg", "speed_of_sound_m_s",
                     "min_uncertainty_deg", "uncertainty_spreads", "onset_ratio"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DoaOptions.{name} must be positive")


@dataclass(frozen=True, eq=False)
class DoaPlan:
    """What :func:`estimate_bearing` needs for one array at one sample rate, computed once:
    the capsule pairs, the band's FFT bins and the steering phases of every candidate
    azimuth."""

    array: ArraySettings
    sample_rate: int
    options: DoaOptions
    nfft: int
    bins: np.ndarray  # FFT bin indices in the band
    pairs: np.ndarray  # (pairs, 2) capsule indices
    azimuths_deg: np.ndarray  # candidate azimuths in the array frame, counter-clockwise from +x
    # Real steering matrix (2 * pairs * bins, azimuths): [cos; sin] of w * tau, so that
    # Re(C . exp(-j w tau)) = [Re C, Im C] @ steering.
    steering: np.ndarray = field(repr=False)
    frames_per_block: int = 1


@dataclass(frozen=True)
class Bearing:
    """The direction of one dog stretch. ``bearing_deg`` is None when there is none (then
    ``reason`` says why)."""

    bearing_deg: float | None  # compass, degrees clockwise from north, 0-360
    uncertainty_deg: float | None  # half-width of the interval around bearing_deg, degrees
    sharpness: float  # pooled SRP-PHAT peak minus its median over azimuth (0 = no direction)
    spread_deg: float | None  # circular standard deviation of the sub-blocks' bearings
    blocks: int  # sub-blocks that carried the estimate
    reason: str = ""  # why there is no bearing; empty when there is one

    @property
    def has_bearing(self) -> bool:
        return self.bearing_deg is not None


def plan_doa(array: ArraySettings, sample_rate: int,
             options: DoaOptions | None = None) -> DoaPlan:
    """The plan for ``array`` at ``sample_rate`` Hz (see :class:`DoaPlan`)."""
    options = options or DoaOptions()
    if sample_rate <= 2 * options.high_hz:
        raise ValueError(f"plan_doa: {sample_rate} Hz cannot carry the band up to "
                         f"{options.high_hz} Hz")
    nfft = 2 ** max(4, round(math.log2(options.frame_s * sample_rate)))
    freqs = np.fft.rfftfreq(nfft, 1.0 / sample_rate)
    bins = np.flatnonzero((freqs >= options.low_hz) & (freqs <= options.high_hz))
    count = array.capsule_count
    pairs = np.array([(i, j) for i in range(count) for j in range(i + 1, count)],
                     dtype=np.intp).reshape(-1, 2)
    azimuths = np.arange(0.0, 360.0, options.grid_step_deg)
    if len(pairs):
        positions = array.positions_m()[:, :2]
        baselines = positions[pairs[:, 0]] - positions[pairs[:, 1]]  # (pairs, 2)
        directions = np.stack([np.cos(np.radians(azimuths)), np.sin(np.radians(azimuths))])
        # A plane wave from unit direction u reaches capsule i earlier than j by
        # (r_i - r_j) . u / c, so the pair's cross-spectrum has phase w (r_i - r_j) . u / c.
        tau = baselines @ directions / options.speed_of_sound_m_s  # (pairs, azimuths)
        phase = 2 * np.pi * freqs[bins][None, :, None] * tau[:, None, :]  # (pairs, bins, az)
        steering = np.concatenate([np.cos(phase), np.sin(phase)]).reshape(-1, len(azimuths))
    else:
        steering = np.zeros((0, len(azimuths)))
    frames_per_block = max(1, round(options.block_s * sample_rate / nfft))
    # float32 throughout: the phases need no more, and it halves the cost on the sensor.
    return DoaPlan(array, sample_rate, options, nfft, bins, pairs, azimuths,
                   np.ascontiguousarray(steering, dtype=np.float32), frames_per_block)


def _capsule_signals(audio: np.ndarray, plan: DoaPlan) -> np.ndarray:
    samples = np.asarray(audio)
    if samples.ndim != 2:
        raise ValueError(f"estimate_bearing: audio must be (samples, channels), got shape "
                         f"{samples.shape}")
    channels = plan.array.channels
    if channels and max(channels) >= samples.shape[1]:
        raise ValueError(f"estimate_bearing: the array's capsules are on channels "
                         f"{list(channels)}; the audio has {samples.shape[1]}")
    return samples[:, list(channels)].T.astype(np.float32)


def _cross_spectra(signals: np.ndarray, plan: DoaPlan
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PHAT-weighted cross-spectra per STFT frame, (frames, 2 * pairs * bins) as [Re, Im],
    each bin's weighted by its share of new power (:func:`_bin_onsets`) unless
    ``bin_onsets`` is off; each frame's band power summed over capsules; and each frame's
    mean share of new power over its bins (1 with ``bin_onsets`` off)."""
    nfft = plan.nfft
    frames = signals.shape[1] // nfft
    blocks = signals[:, : frames * nfft].reshape(signals.shape[0], frames, nfft)
    window = np.hanning(nfft).astype(np.float32)
    spectra = scipy.fft.rfft(blocks * window, axis=2, workers=1)[:, :, plan.bins]
    bin_power = np.einsum("mtb,mtb->tb", spectra.real, spectra.real) + np.einsum(
        "mtb,mtb->tb", spectra.imag, spectra.imag)
    whitened = spectra / np.maximum(np.abs(spectra), np.float32(1e-30))
    new_share = np.ones(frames, dtype=np.float32)
    if plan.options.bin_onsets and frames:
        shares = _bin_onsets(bin_power, plan.options.onset_ratio)
        # both capsules' spectra by the root, so that each pair's cross-spectrum gets the share
        whitened *= np.sqrt(shares)[None]
        new_share = shares.mean(axis=1)
    i, j = plan.pairs[:, 0], plan.pairs[:, 1]
    cross = whitened[i] * np.conj(whitened[j])  # (pairs, frames, bins)
    cross = np.moveaxis(cross, 1, 0).reshape(frames, -1)
    return np.concatenate([cross.real, cross.imag], axis=1), bin_power.sum(axis=1), new_share


def srp_phat(audio: np.ndarray, plan: DoaPlan) -> np.ndarray:
    """The pooled SRP-PHAT of a stretch over ``plan.azimuths_deg`` (array frame), normalised
    so that one plane wave whose every bin in the band is new peaks at 1. For plots and
    tests; ``audio`` is (samples, channels) as sounddevice and soundfile give it."""
    cross, power, _ = _cross_spectra(_capsule_signals(audio, plan), plan)
    weights = _frame_weights(power, plan.options.onset_ratio)
    pooled = weights @ cross / max(weights.sum(), 1e-300)
    return np.asarray(pooled @ plan.steering / max(len(plan.pairs) * len(plan.bins), 1))


def _frame_weights(power: np.ndarray, onset_ratio: float = 1.5) -> np.ndarray:
    """Each STFT frame's weight: how far its band power rises over ``onset_ratio`` times the
    frame before (and the stretch's background, its 20th percentile). A bark's onset reaches
    the array by the direct path before any reflection (the precedence effect: a facade 4 m
    behind the sensor answers 10-25 ms later), so the onsets carry the direction and the
    sustained parts, where direct sound and echoes mix, do not. A stretch with fewer than two
    rising frames falls back to its power above the background."""
    if power.size == 0:
        return power
    background = np.percentile(power, 20)
    before = np.maximum(np.concatenate([[background], power[:-1]]), background)
    rising = np.maximum(power - onset_ratio * before, 0.0)
    if np.count_nonzero(rising) >= 2:
        return rising
    above = np.maximum(power - background, 0.0)
    return above if above.sum() > 0 else np.ones_like(power)


def _bin_onsets(bin_power: np.ndarray, onset_ratio: float) -> np.ndarray:
    """Each bin's share of new power in each frame, (frames, bins), 0-1: one minus
    ``onset_ratio`` times its power in the frame before (at least its background, its 20th
    percentile over the stretch) over its power now. :func:`_frame_weights` per bin: a bark's
    harmonics rise together, by the direct path first, while the bins between them carry the
    street's steady noise and the facade's echo (10-30 ms later) repeats the frame before;
    phase-transformed, every bin would count alike, and those would pull the peak towards
    the street or the dog's mirror image. Measured on benchmarks/bearing_sim.py's scenes
    (docs/BEARING.md): the issue's accuracy goal met in 9 of 9 board-and-scene cells
    against 8 of 9, the median error at 0-20 dB SNR lower in 34 of 36 cells."""
    background = np.percentile(bin_power, 20, axis=0)
    before = np.maximum(np.concatenate([background[None, :], bin_power[:-1]]), background)
    share = 1.0 - onset_ratio * before / np.maximum(bin_power, np.float32(1e-30))
    return np.clip(share, 0.0, 1.0).astype(np.float32)


def _peak(response: np.ndarray, step_deg: float) -> float:
    """The azimuth of the response's maximum, refined by a parabola through its neighbours
    (the grid is circular)."""
    k = int(np.argmax(response))
    left, centre, right = response[k - 1], response[k], response[(k + 1) % len(response)]
    curvature = left - 2 * centre + right
    offset = 0.5 * (left - right) / curvature if curvature < 0 else 0.0
    return float((k + offset) * step_deg % 360.0)


def _circular_spread_deg(angles_deg: np.ndarray, weights: np.ndarray) -> float:
    radians = np.radians(angles_deg)
    resultant = np.hypot(weights @ np.cos(radians), weights @ np.sin(radians)) / weights.sum()
    variance = -2.0 * math.log(min(max(float(resultant), 1e-12), 1.0))
    return math.degrees(math.sqrt(abs(variance)))


def estimate_bearing(audio: np.ndarray, plan: DoaPlan) -> Bearing:
    """The compass bearing of the dominant source in a dog stretch, or no bearing.

    ``audio`` is the stretch as captured, (samples, channels) at ``plan.sample_rate``; the
    capsules are read from ``plan.array.channels``.
    """
    options = plan.options
    if not plan.array.can_bear:
        return Bearing(None, None, 0.0, None, 0, NO_CAPSULES)
    cross, power, new_share = _cross_spectra(_capsule_signals(audio, plan), plan)
    per_block = plan.frames_per_block
    count = cross.shape[0] // per_block
    if count < 2:
        return Bearing(None, None, 0.0, None, count, TOO_SHORT)
    weights = _frame_weights(power[: count * per_block], options.onset_ratio)
    weighted = (cross[: count * per_block] * weights[:, None]).reshape(count, per_block, -1)
    block_sums = weighted.sum(axis=1)  # (blocks, 2 * pairs * bins)
    block_weights = weights.reshape(count, per_block).sum(axis=1)
    # what each sub-block puts into the pooled response: its weight times its bins' share
    entered = (weights * new_share[: count * per_block]).reshape(count, per_block).sum(axis=1)
    used = block_weights >= options.min_block_share * block_weights.sum()
    if used.sum() < 2:
        return Bearing(None, None, 0.0, None, int(used.sum()), TOO_SHORT)
    norm = len(plan.pairs) * len(plan.bins)
    pooled = block_sums[used].sum(axis=0) @ plan.steering / (block_weights[used].sum() * norm)
    sharpness = float(pooled.max() - np.median(pooled))
    azimuth = _peak(pooled, options.grid_step_deg)
    blocks = block_sums[used] @ plan.steering
    block_azimuths = np.array([_peak(b, options.grid_step_deg) for b in blocks])
    # weighted by what each put in: a frame of the facade's echo, loud but with few new bins,
    # would otherwise scatter a clap's two frames (tests/test_bearing_check.py)
    spread = _circular_spread_deg(
        block_azimuths, entered[used] if entered[used].sum() > 0 else block_weights[used])
    n = int(used.sum())
    if sharpness < options.min_sharpness:
        return Bearing(None, None, sharpness, spread, n, DIFFUSE)
    if spread > options.max_spread_deg:
        return Bearing(None, None, sharpness, spread, n, SCATTERED)
    uncertainty = max(options.min_uncertainty_deg, options.uncertainty_spreads * spread)
    return Bearing(plan.array.compass_bearing(azimuth), uncertainty, sharpness, spread, n)
