"""One-third-octave band levels per IEC 61260-1:2014 (base-10 system).

Pure DSP: a streaming multirate filter bank that turns blocks of samples (digital full
scale = 1.0) into Z-weighted band Leq values in dB re 20 uPa, with the same calibration
convention and silence floor as ``sensor.levels`` (RMS 1.0 reads ``full_scale_db``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import overload

import numpy as np
from scipy import signal

from sensor.kernels import CHAINS, SILENT_SECTION, four_chain_pass, stack_chains
from sensor.levels import level_db, validate_block, validate_sample_rate

# IEC 61260-1:2014, base-10 system, G = 10^(3/10), fr = 1000 Hz; for b = 3 the
# exact mid-band frequency is fm = fr * G^(x/3) = 1000 * 10^(x/10) and the band edges are
# fm * G^(-+1/6) = fm * 10^(-+0.05).
_REFERENCE_FREQUENCY_HZ = 1000.0
_HALF_BAND_RATIO = 10.0**0.05
LOWEST_BAND_INDEX = -16  # 25 Hz
HIGHEST_BAND_INDEX = 10  # 10 kHz
USABLE_BANDWIDTH_FRACTION = 0.45
"""A band is offered only if its upper edge lies below this fraction of the sample rate."""

BAND_FILTER_ORDER = 3
"""Butterworth order of a band run at a rate where its upper edge is <= 0.26 of the rate:
meets the class 1 mask of IEC 61260-1:2014 Table 1 there (the bilinear transform
widens the band's lower skirt as it nears Nyquist, so order 3 fails above ~0.27)."""
NEAR_NYQUIST_BAND_FILTER_ORDER = 4
"""Order of a top band that has to run closer to Nyquist (16 and 32 kHz capture): order 4
keeps the class 1 mask up to an upper edge of 0.45 of the rate."""
_ORDER3_MAX_EDGE_FRACTION = 0.26

# Anti-alias low-pass before each decimation by 2: passband droop and stopband attenuation
# in dB. 80 dB clears the 70 dB class 1 floor (Table 1, Omega >= G^4) for every alias.
_DECIMATION_DROOP_DB = 0.01
_DECIMATION_ATTENUATION_DB = 80.0


@overload
def band_centre_hz(x: int) -> float: ...
@overload
def band_centre_hz(x: np.ndarray) -> np.ndarray: ...
def band_centre_hz(x: np.ndarray | int) -> np.ndarray | float:
    """Exact mid-band frequency in Hz of base-10 one-third-octave band ``x``:
    ``fm = 1000 * 10**(x/10)`` (IEC 61260-1:2014, odd b = 3). Scalar in, float out."""
    centres = _REFERENCE_FREQUENCY_HZ * 10.0 ** (np.asarray(x, dtype=np.float64) / 10.0)
    if np.ndim(centres) == 0:
        return float(centres)
    return centres


def band_edges_hz(x: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper band-edge frequencies in Hz, ``fm * 10**(-+0.05)``
    (IEC 61260-1:2014 band edges)."""
    centres = np.asarray(band_centre_hz(np.asarray(x)), dtype=np.float64)
    return centres / _HALF_BAND_RATIO, centres * _HALF_BAND_RATIO


def third_octave_band_indices(sample_rate: int) -> np.ndarray:
    """Band numbers x (25 Hz = -16 ... 10 kHz = 10) that the bank offers at ``sample_rate`` Hz.

    Only bands whose upper edge is below 0.45 * sample_rate are kept, e.g. 25 Hz-6.3 kHz
    (25 bands) at 16 kHz and 25 Hz-10 kHz (27 bands) at 32, 44.1 and 48 kHz.
    """
    sample_rate = validate_sample_rate(sample_rate)
    candidates = np.arange(LOWEST_BAND_INDEX, HIGHEST_BAND_INDEX + 1)
    _, upper_edges = band_edges_hz(candidates)
    return candidates[upper_edges < USABLE_BANDWIDTH_FRACTION * sample_rate]


@dataclass
class _ChainGroup:
    """Up to four filter chains of one stage, run side by side by ``four_chain_pass``."""

    sos: np.ndarray  # (n_sections, 6, CHAINS)
    zi: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class _Stage:
    """The bands computed at one rate of the multirate chain, and their running state.

    Band b is chain b % 4 of group b // 4; when a lower stage follows, chain 3 of the last
    group is its anti-alias low-pass, whose output is decimated by 2 with the phase carried
    over."""

    factor: int  # decimation factor re the capture rate: 1, 2, 4, ...
    n_bands: int
    groups: list[_ChainGroup]
    has_lowpass: bool
    last_power: np.ndarray = field(default_factory=lambda: np.zeros(0))
    odd_phase: bool = False  # True when the next low-passed sample has an odd index (dropped)


def _chain_groups(
    band_sos: tuple[np.ndarray, ...], lowpass: np.ndarray | None
) -> list[_ChainGroup]:
    """The bands' sections, and the low-pass's last, in groups of ``CHAINS`` chains; shorter
    chains padded with pass-through sections, unused chains silent."""
    chains = list(band_sos)
    if lowpass is not None:
        chains += [SILENT_SECTION[None, :]] * (-(len(chains) + 1) % CHAINS) + [lowpass]
    chains += [SILENT_SECTION[None, :]] * (-len(chains) % CHAINS)
    return [
        _ChainGroup(stack_chains(chains[first : first + CHAINS]))
        for first in range(0, len(chains), CHAINS)
    ]


class ThirdOctaveBank:
    """Streaming one-third-octave filter bank (class 1 per IEC 61260-1:2014 where possible),
    multirate: the top octave's bands are filtered at the capture rate, then the signal is
    low-passed and decimated by 2 for each lower octave (stateful, including the decimation
    phase, so results do not depend on how the signal is split into blocks, also for odd
    block lengths like 44100/4).

    Each band runs at the lowest rate fs/2**k at which its upper edge is at most 0.26 of
    that rate: at 44.1 and 48 kHz that is three bands (one octave) per rate, 10 kHz down
    to 25 Hz at fs/256; at 16 kHz the top six bands (2-6.3 kHz) and at 32 kHz the top
    five (4-10 kHz) share the capture rate.
    Each band is a Butterworth band-pass with its -3 dB points on the exact band edges,
    designed at the rate where it runs: order 3, or 4 for the few top bands that sit
    closer to Nyquist at 16 and 32 kHz. Every band meets the class 1 mask at all four
    supported rates, aliases included.

    A band output sample at 1/D of the capture rate stands for the D capture-rate samples
    that start at it; block Leq values weight samples by how many of those fall in the
    block, so band energies add up exactly across blocks (an Leq over a long block equals
    the energy mean of its parts) and any block length > 0 works.
    """

    band_indices: np.ndarray
    centres_hz: np.ndarray

    def __init__(self, sample_rate: int, full_scale_db: float) -> None:
        """``sample_rate`` in Hz; ``full_scale_db`` is the dB SPL read for RMS 1.0."""
        self.sample_rate = validate_sample_rate(sample_rate)
        if not np.isfinite(full_scale_db):
            raise ValueError(f"full_scale_db must be finite, got {full_scale_db!r}")
        self.full_scale_db = float(full_scale_db)
        self.band_indices = third_octave_band_indices(self.sample_rate)
        self.centres_hz = np.asarray(band_centre_hz(self.band_indices))
        stage_designs, lowpasses = _design_filters(self.sample_rate)
        # The low-pass in front of stage k + 1 filters stage k's stream: it runs with stage k.
        following = [*lowpasses, None]
        self._stages = [
            _Stage(factor, len(band_sos), _chain_groups(band_sos, lowpass), lowpass is not None)
            for (factor, band_sos), lowpass in zip(stage_designs, following, strict=True)
        ]
        # Per band, nominal / effective bandwidth: a Butterworth band-pass of order N passes
        # (pi/2N)/sin(pi/2N) times its nominal bandwidth of flat noise (+0.20 dB at N = 3), so
        # without this the band levels of broadband sound (barks, background) would add up to
        # more than the broadband level. Dividing it out makes band powers of noise exact and
        # leaves the relative attenuation (IEC 61260-1 5.10) untouched; a pure tone at mid-band
        # reads the effective-bandwidth deviation (about -0.2 dB) low instead.
        self.bandwidth_correction = np.concatenate([
            [_nominal_over_effective_bandwidth(sos, self.sample_rate / factor)
             for sos in band_sos]
            for factor, band_sos in stage_designs[::-1]
        ])
        self.reset()

    def reset(self) -> None:
        """Return every filter, the decimation phases and the sample count to silence/zero."""
        self._samples_seen = 0
        for stage in self._stages:
            for group in stage.groups:
                group.zi = np.zeros((group.sos.shape[0], 2, CHAINS))
            stage.last_power = np.zeros(stage.n_bands)
            stage.odd_phase = False

    def process(self, block: np.ndarray) -> np.ndarray:
        """Z-weighted Leq per band over ``block`` (1-D float samples, full scale 1.0, any
        length > 0), in dB re 20 uPa, ordered as ``band_indices``; float64 and finite."""
        samples = validate_block(block)
        count = samples.size
        position = self._samples_seen
        band_energy: list[np.ndarray] = []
        stream = samples
        for stage in self._stages:
            energy, stream = self._run_stage(stage, stream, position, count)
            band_energy.append(energy)
        self._samples_seen = position + count
        # Stages run top-down; bands are reported bottom-up.
        energy = np.concatenate(band_energy[::-1]) * self.bandwidth_correction
        return np.asarray(level_db(energy / count, self.full_scale_db), dtype=np.float64)

    @staticmethod
    def _run_stage(
        stage: _Stage, stream: np.ndarray, position: int, count: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(Sum over the block's capture-rate samples of each band's squared output, holding
        each decimated sample for the ``factor`` capture samples it stands for; the stream
        low-passed and decimated by 2 for the next stage, empty if none follows)."""
        factor = stage.factor
        # Capture samples at the block start still covered by the previous output sample.
        carried = min((factor - position % factor) % factor, count)
        energy = carried * stage.last_power
        if stream.size == 0:
            return energy, stream
        # The block's last output sample covers only the capture samples left in the block.
        uncovered = stream.size * factor - (count - carried)
        sums = np.empty(CHAINS * len(stage.groups))
        last_power = np.empty_like(sums)
        lowpassed = np.empty_like(stream)  # chain 3's output; the last group's is the low-pass
        for g, group in enumerate(stage.groups):
            chains = slice(CHAINS * g, CHAINS * (g + 1))
            four_chain_pass(stream, group.sos, group.zi, sums[chains], last_power[chains],
                            lowpassed)
        bands = slice(0, stage.n_bands)
        energy += factor * sums[bands] - uncovered * last_power[bands]
        stage.last_power = last_power[bands].copy()
        if not stage.has_lowpass:
            return energy, stream[:0]
        start = 1 if stage.odd_phase else 0
        if stream.size % 2:
            stage.odd_phase = not stage.odd_phase
        return energy, np.ascontiguousarray(lowpassed[start::2])


def _nominal_over_effective_bandwidth(sos: np.ndarray, rate: float) -> float:
    """Nominal bandwidth (band edges, Hz) over the filter's effective (noise) bandwidth, the
    integral of |H(f)|^2 from 0 to Nyquist, for a band-pass with unit gain at mid-band."""
    frequencies, response = signal.sosfreqz(sos, worN=1 << 16, fs=rate)
    power = np.abs(response) ** 2
    effective_hz = float(np.sum((power[1:] + power[:-1]) * np.diff(frequencies)) / 2.0)
    peak = int(np.argmax(power))
    centre = float(frequencies[peak])
    nominal_hz = centre * (10**0.05 - 10**-0.05)
    return nominal_hz / (effective_hz / float(power[peak]))


@functools.cache
def _design_filters(
    sample_rate: int,
) -> tuple[tuple[tuple[int, tuple[np.ndarray, ...]], ...], tuple[np.ndarray, ...]]:
    """Filters of the bank at ``sample_rate`` Hz, designed once per rate (each bank takes
    copies, since sosfilt wants writeable arrays): ((decimation factor, band SOS per band
    ascending) per stage, anti-alias low-pass SOS in front of each stage after the first).

    Each band goes to the lowest rate where its order-3 design keeps the class 1 mask,
    i.e. the deepest halving k with upper edge <= 0.26 * fs / 2**k (k = 0 if none).
    """
    indices = third_octave_band_indices(sample_rate)
    _, upper = band_edges_hz(indices)
    depth = np.floor(np.log2(_ORDER3_MAX_EDGE_FRACTION * sample_rate / upper)).astype(int)
    depth = np.maximum(depth, 0)
    stages: list[tuple[int, tuple[np.ndarray, ...]]] = []
    lowpasses: list[np.ndarray] = []
    for level in range(int(depth.max()) + 1):
        factor = 2**level
        rate = sample_rate / factor
        if level > 0:
            highest_edge_below = float(upper[depth >= level].max())
            lowpasses.append(_decimation_lowpass(2.0 * rate, highest_edge_below))
        lower_edges, upper_edges = band_edges_hz(indices[depth == level])
        band_sos = tuple(
            signal.butter(
                _band_filter_order(hi, rate), [lo, hi], btype="bandpass", fs=rate, output="sos"
            )
            for lo, hi in zip(lower_edges, upper_edges, strict=True)
        )
        stages.append((factor, band_sos))
    return tuple(stages), tuple(lowpasses)


def _band_filter_order(upper_edge_hz: float, rate: float) -> int:
    """Butterworth order for a band whose upper edge is ``upper_edge_hz`` at ``rate`` Hz."""
    if upper_edge_hz <= _ORDER3_MAX_EDGE_FRACTION * rate:
        return BAND_FILTER_ORDER
    return NEAR_NYQUIST_BAND_FILTER_ORDER


def _decimation_lowpass(input_rate: float, passband_edge_hz: float) -> np.ndarray:
    """Chebyshev type II anti-alias low-pass (SOS) for decimating ``input_rate`` by 2.

    Monotonic passband, at most 0.01 dB down at ``passband_edge_hz`` (the highest band edge
    computed at the lower rate) and flatter below, so the droop does not pile up over the
    eight stages a 25 Hz band passes through; at least 80 dB down from
    ``input_rate/2 - passband_edge_hz``, so every alias that folds onto a band edge or
    inside a band is suppressed beyond the class 1 far-stopband limit of 70 dB
    (IEC 61260-1:2014 Table 1).
    """
    stopband_edge_hz = input_rate / 2.0 - passband_edge_hz
    order, stopband_hz = signal.cheb2ord(
        passband_edge_hz,
        stopband_edge_hz,
        _DECIMATION_DROOP_DB,
        _DECIMATION_ATTENUATION_DB,
        fs=input_rate,
    )
    return signal.cheby2(
        order,
        _DECIMATION_ATTENUATION_DB,
        stopband_hz,
        btype="lowpass",
        fs=input_rate,
        output="sos",
    )
