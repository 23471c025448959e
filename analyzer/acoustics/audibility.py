"""Level 100 ft beyond the premises boundary and the "plainly audible" decision, per event.

For each dog-vocalization event of a device (REFERENCE.md sections 4-5, DESIGN.md section 4):

1. **Event spectrum**: one-third-octave band levels over the event, 100 Hz - 6.3 kHz, from the
   frames' per-second band levels (wire v2 carries no finer spectra: issue 24). Within each
   second the band energy is shared out over time by the LAeq envelope's 20 ms steps, each
   holding its 0.5 s block's value (the wire sends LAeq per 0.5 s: finer carries speech): the
   second's band powers times the ratio of the A-weighted energy of the event's steps to that
   of the whole second. A bark that dominates its half-second block is then read at its own
   level rather than diluted by the rest of the second (a shorter one, by the rest of its
   block: low, in the owner's favour); background in the envelope only lowers the ratio (the owner's
   favour). It assumes the spectrum's shape does not change within the second. A second
   sent with its dog scores only (a ``"scores"`` frame, :mod:`sensor.gate`) has no spectrum:
   the spectrum comes from the event's other seconds, and an event with none has no
   audibility (unknown, which never counts as plainly audible).
2. **Background**: per band and A-weighted, the L90 (``background_percentile``) of the 1 s
   levels of the bark-free seconds in a rolling window (default 10 minutes). With too few
   bark-free seconds the window's quietest seconds of any kind are used and the output says
   so. Since wire v4 the sensor sends band spectra only in dog seconds, and every 10 s, per
   band, the L90 over the bark-free seconds of its last ten minutes (``Frame.background``,
   :mod:`sensor.gate`): the band background is then the latest of those
   (``Background.bands_from``); the A-weighted one still comes from every second's LAeq.
3. **Residual-noise correction** (ISO 1996-2): the background's energy is removed from each
   band and from LAeq/LAFmax; a value within ``residual_limit_db`` (3 dB) of the background
   is not corrected but flagged (it is then only an upper bound).
4. **Propagation** (:mod:`analyzer.acoustics.propagation`) from the sensor to the receiver 100 ft
   beyond the boundary, every uncertain input at the end of its range that gives the lower
   level at the receiver (the owner's favour): the dog nearer the sensor and farther from
   the receiver by the distance uncertainty, the highest air absorption over the weather
   spread, the ground factor in the ground type's range that attenuates most.
5. **Uncertainty**: combined standard uncertainty u from calibration, distances and the
   propagation model; the decision uses level - k u (k = 1.645, one-sided 95 %).
6. **Audibility** per band: margin of that level over the larger of the threshold of hearing
   (ISO 226:2003) and the background, which is assumed to be the same at the receiver as at
   the sensor (stated in every result). Plainly audible when the margin reaches
   ``margin_db`` in at least one band of the dog's vocal range. The SII band-audibility
   function (E - D + 15)/30 (ANSI S3.5) gives a 0..1 score of how clear the call is.

When the sensor itself stands 100 ft or more beyond the boundary, audibility is judged from
what it measured (no propagation, which could only raise the level), and the estimate at the
receiver is reported beside it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from analyzer.acoustics.propagation import (
    a_weighted_total_db,
    absorption_db_per_m,
    ground_attenuation_db,
    propagate_band_levels,
)
from analyzer.acoustics.site import GROUND_FACTORS, InstallationRecord
from analyzer.detect import DogEvent
from sensor.configfile import setting
from sensor.wire import Frame


@dataclass(frozen=True)
class AudibilitySettings:
    """The level at 100 ft and the plainly-audible decision (docs/AUDIBILITY.md)."""

    margin_db: float = setting(10.0, "margin over threshold and background that makes an event "
                               "plainly audible, dB", 0.0, 40.0)
    coverage_factor: float = setting(1.645, "k: the decision uses level - k u (1.645: one-sided "
                                     "95 %)", 0.0, 5.0)
    background_percentile: float = setting(90.0, "background is the level exceeded this % of "
                                           "the time (90: L90)", 50.0, 99.0)
    background_window_s: float = setting(600.0, "rolling background window, s", 10.0, 86400.0)
    min_background_s: int = setting(30, "bark-free seconds needed, else all seconds are used",
                                    1, 3600)
    bark_free_score: float = setting(0.3, "a second is bark-free when its highest dog score is "
                                     "below this", 0.0, 1.0)
    residual_limit_db: float = setting(3.0, "no background correction within this of the "
                                       "background (ISO 1996-2), dB", 0.0, 10.0)
    vocal_low_hz: float = setting(160.0, "lowest band centre of the dog's vocal range, Hz",
                                  100.0, 6300.0)
    vocal_high_hz: float = setting(6300.0, "highest band centre of the dog's vocal range, Hz",
                                   100.0, 6300.0)
    event_memory_s: float = setting(120.0, "frames kept to assess events that end later, s",
                                    10.0, 3600.0)


BAND_INDICES = np.arange(-10, 9)  # 100 Hz ... 6.3 kHz: measured at every capture rate
BAND_CENTRES_HZ = 1000.0 * 10.0 ** (BAND_INDICES / 10.0)
BACKGROUND_ASSUMPTION = "background at the receiver assumed equal to the background at the sensor"

# ISO 226:2003 threshold of hearing T_f (free field, binaural), dB SPL, at 100 Hz ... 6.3 kHz
# (REFERENCE.md 5.1; the 2023 edition differs only at 20 Hz).
HEARING_THRESHOLD_DB = np.array([
    26.5, 22.1, 17.9, 14.4, 11.4, 8.6, 6.2, 4.4, 3.0, 2.2, 2.4, 3.5, 1.7, -1.3, -4.2, -6.0,
    -5.4, -1.5, 6.0,
])


def frame_band_levels(frame: Frame) -> np.ndarray:
    """The frame's Leq in the bands of BAND_INDICES, dB; a band it lacks reads -300 dB."""
    return band_levels(frame.band_first_index, frame.bands_db)


def band_levels(first_index: int, bands_db: np.ndarray) -> np.ndarray:
    """Levels of bands from index ``first_index`` on, in the bands of BAND_INDICES, dB; a band
    they lack reads -300 dB."""
    levels = np.full(BAND_INDICES.size, -300.0)
    index = BAND_INDICES - first_index
    present = (index >= 0) & (index < len(bands_db))
    levels[present] = np.asarray(bands_db, dtype=np.float64)[index[present]]
    return levels


def event_share_db(laeq_steps_db: np.ndarray, inside: np.ndarray) -> float:
    """10 lg of (mean A-weighted energy of the steps ``inside`` / mean over all the steps):
    how much louder than its whole second the part of it inside an event was, dB (>= 0 when the
    event is the loud part)."""
    energy = np.power(10.0, np.asarray(laeq_steps_db, dtype=np.float64) / 10.0)
    return float(10.0 * np.log10(energy[inside].mean() / max(energy.mean(), 1e-30)))


def energy_mean_db(levels_db: np.ndarray, axis: int = 0) -> np.ndarray:
    """Energy average of levels in dB along ``axis``."""
    return np.asarray(10.0 * np.log10(np.mean(np.power(10.0, levels_db / 10.0), axis=axis)))


def residual_corrected_db(total_db: np.ndarray, background_db: np.ndarray,
                          limit_db: float) -> tuple[np.ndarray, np.ndarray]:
    """(corrected levels, flags): background energy removed where the total exceeds it by more
    than ``limit_db``; elsewhere the total is kept (an upper bound) and flagged."""
    total = np.asarray(total_db, dtype=np.float64)
    background = np.asarray(background_db, dtype=np.float64)
    flagged = total - background <= limit_db
    corrected = total.copy()
    ok = ~flagged
    corrected[ok] = 10.0 * np.log10(10.0 ** (total[ok] / 10.0) - 10.0 ** (background[ok] / 10.0))
    return corrected, flagged


@dataclass(frozen=True)
class Background:
    """Background levels at the sensor (dB): A-weighted and per band, and where they came
    from (``bark-free`` seconds, or ``all`` seconds when too few were bark-free)."""

    la90_db: float
    bands_db: np.ndarray
    seconds: int
    source: str
    bands_from: str = "seconds"  # "seconds" (1 s spectra) or "sensor" (the sensor's L90s)


class BackgroundTracker:
    """Rolling window of 1 s levels of one device, and of the sensor's band L90s,
    for percentile background estimates."""

    def __init__(self, settings: AudibilitySettings) -> None:
        self.settings = settings
        # (capture ns, LAeq, band Leq or None: a second that carried no spectrum)
        self._quiet: deque[tuple[int, float, np.ndarray | None]] = deque()
        self._all: deque[tuple[int, float, np.ndarray | None]] = deque()
        # the sensor's latest band L90s: (capture ns of the frame they came in, seconds, L90s)
        self._sensor: tuple[int, int, np.ndarray] | None = None

    def add_second(self, capture_ns: int, laeq_db: float, bands_db: np.ndarray | None,
                   bark_free: bool) -> None:
        """Record one second's LAeq and band Leq (None: the second carried no spectrum)."""
        horizon = capture_ns - int(self.settings.background_window_s * 1e9)
        for store, keep in ((self._all, True), (self._quiet, bark_free)):
            if keep:
                store.append((capture_ns, laeq_db, bands_db))
            while store and store[0][0] < horizon:
                store.popleft()
        if self._sensor is not None and self._sensor[0] < horizon:
            self._sensor = None

    def add_statistics(self, received_ns: int, seconds: int, bands_db: np.ndarray) -> None:
        """Record the sensor's band L90s over ``seconds`` bark-free seconds, sent in the frame
        captured at ``received_ns``; they expire with the window, as a second would."""
        self._sensor = (received_ns, seconds, bands_db)  # the latest describes the window

    def estimate(self) -> Background | None:
        """The background now, or None before any second was seen (or any spectrum)."""
        store, source = self._quiet, "bark-free"
        if len(store) < self.settings.min_background_s:
            store, source = self._all, "all"
        if not store:
            return None
        percentile = 100.0 - self.settings.background_percentile
        la = np.array([s[1] for s in store])
        if self._sensor is not None:
            bands, bands_from = self._sensor[2], "sensor"
        else:
            spectra = [s[2] for s in store if s[2] is not None]
            if not spectra:
                spectra = [s[2] for s in self._all if s[2] is not None]
            if not spectra:
                return None
            bands = np.percentile(np.stack(spectra), percentile, axis=0)
            bands_from = "seconds"
        return Background(
            la90_db=float(np.percentile(la, percentile)),
            bands_db=bands,
            seconds=len(store),
            source=source,
            bands_from=bands_from,
        )


@dataclass(frozen=True)
class EventAudibility:
    """The audibility assessment of one event. Levels in dB; margins after level - k u."""

    level_at_100ft_db: float
    lafmax_at_100ft_db: float
    audibility_margin_db: float
    plainly_audible: bool
    uncertainty_db: float
    audibility_score: float
    judged_from: str
    estimate_at_100ft_db: float
    background_la90_db: float
    background_source: str
    background_limited: bool
    dominant_band_hz: float
    band_levels_at_100ft_db: list[float] = field(repr=False)
    band_margins_db: list[float] = field(repr=False)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields with the documented names."""
        return {
            "level_at_100ft_db": round(self.level_at_100ft_db, 2),
            "lafmax_at_100ft_db": round(self.lafmax_at_100ft_db, 2),
            "audibility_margin_db": round(self.audibility_margin_db, 2),
            "plainly_audible": self.plainly_audible,
            "uncertainty_db": round(self.uncertainty_db, 2),
            "audibility_score": round(self.audibility_score, 3),
            "judged_from": self.judged_from,
            "estimate_at_100ft_db": round(self.estimate_at_100ft_db, 2),
            "background_la90_db": round(self.background_la90_db, 2),
            "background_source": self.background_source,
            "background_limited": self.background_limited,
            "dominant_band_hz": round(self.dominant_band_hz, 1),
        }


class Propagator:
    """The owner's-favour propagation of one site, computed once."""

    def __init__(self, site: InstallationRecord) -> None:
        self.site = site
        delta = site.distance_uncertainty_m
        self.sensor_m = max(site.source_to_sensor_m - delta, 0.1)
        self.receiver_m = site.source_to_receiver_m + delta
        weather = [
            (t, h)
            for t in (site.temperature_c - site.weather_spread_c, site.temperature_c,
                      site.temperature_c + site.weather_spread_c)
            for h in (max(5.0, site.humidity_pct - site.weather_spread_pct), site.humidity_pct,
                      min(100.0, site.humidity_pct + site.weather_spread_pct))
        ]
        alphas = np.stack([absorption_db_per_m(BAND_CENTRES_HZ, t, h, site.pressure_kpa)
                           for t, h in weather])
        # The farther point gets the larger share of absorption: the highest alpha lowers it most.
        self.alpha_db_m = alphas.max(axis=0) if self.receiver_m >= self.sensor_m else alphas.min(
            axis=0)
        self.nominal_alpha_db_m = absorption_db_per_m(BAND_CENTRES_HZ, site.temperature_c,
                                                      site.humidity_pct, site.pressure_kpa)
        self.ground_change_db = np.zeros(BAND_INDICES.size)
        if site.ground_effect:
            low, high = GROUND_FACTORS[site.ground]
            changes = [self._ground_change(g) for g in np.linspace(low, high, 5)]
            self.ground_change_db = np.max(changes, axis=0)
        ratio = self.receiver_m / self.sensor_m
        self.distance_uncertainty_db = (20.0 / math.log(10.0)) * math.hypot(
            delta / site.source_to_sensor_m, delta / site.source_to_receiver_m
        ) if ratio != 1.0 else 0.0

    def _ground_change(self, ground_factor: float) -> np.ndarray:
        site = self.site
        at_receiver = ground_attenuation_db(BAND_CENTRES_HZ, site.source_height_m,
                                            site.receiver_height_m, self.receiver_m,
                                            ground_factor)
        at_sensor = ground_attenuation_db(BAND_CENTRES_HZ, site.source_height_m,
                                          site.sensor_height_m, self.sensor_m, ground_factor)
        return np.asarray(at_receiver - at_sensor)

    def to_receiver(self, band_levels_db: np.ndarray) -> np.ndarray:
        """Band levels at the receiver, owner's-favour geometry and air."""
        moved = propagate_band_levels(band_levels_db, BAND_CENTRES_HZ, self.sensor_m,
                                      self.receiver_m, self.alpha_db_m)
        return np.asarray(moved - self.ground_change_db)


class AudibilityAssessor:
    """Per-device state: recent frames' band spectra and the background; assesses events."""

    def __init__(self, site: InstallationRecord, settings: AudibilitySettings) -> None:
        self.site = site
        self.settings = settings
        self.propagator = Propagator(site)
        self.background = BackgroundTracker(settings)
        # (capture ns, hop ns, band levels of the second or None, LAeq per step)
        self._recent: deque[tuple[int, int, np.ndarray | None, np.ndarray]] = deque()
        vocal = (settings.vocal_low_hz <= BAND_CENTRES_HZ) & (
            settings.vocal_high_hz >= BAND_CENTRES_HZ)
        self.vocal = vocal

    def observe(self, frame: Frame, max_dog_score: float) -> None:
        """Take in one frame (capture order) and its highest dog score."""
        bands = frame_band_levels(frame) if len(frame.bands_db) else None
        hop_ns = round(frame.hop_s * 1e9)
        self._recent.append((frame.capture_ns, hop_ns, bands, frame.laeq_steps_db))
        horizon = frame.capture_ns - int(self.settings.event_memory_s * 1e9)
        while self._recent and self._recent[0][0] < horizon:
            self._recent.popleft()
        # a "levels" or "scores" second (wire v4's gate) carries no spectrum, only its LAeq
        self.background.add_second(frame.capture_ns, frame.laeq_db, bands,
                                   max_dog_score < self.settings.bark_free_score)
        if frame.background is not None:
            minute = frame.background
            self.background.add_statistics(frame.capture_ns, minute.seconds,
                                       band_levels(minute.first_index, minute.bands_db))

    def _event_bands(self, event: DogEvent) -> np.ndarray | None:
        """Band levels over the event's steps that have a spectrum (see the module's point 1),
        or None when none of its frames is remembered or none has a spectrum (a "scores"
        frame carries none: ``sensor.gate``)."""
        power = np.zeros(BAND_INDICES.size)
        steps = 0
        for start_ns, hop_ns, bands, laeq_steps in self._recent:
            if bands is None:
                continue
            times = start_ns + hop_ns * np.arange(laeq_steps.size)
            inside = (times >= event.onset_ns) & (times < event.offset_ns)
            n = int(np.count_nonzero(inside))
            if n:
                share_db = event_share_db(laeq_steps, inside)
                power += n * np.power(10.0, (bands + share_db) / 10.0)
                steps += n
        if steps == 0:
            return None
        return np.asarray(10.0 * np.log10(np.maximum(power / steps, 1e-30)))

    def assess(self, event: DogEvent) -> EventAudibility | None:
        """Audibility of an event whose frames were observed; None when they are gone."""
        event_bands = self._event_bands(event)
        background = self.background.estimate()
        if event_bands is None or background is None:
            return None
        s = self.settings
        bands, _ = residual_corrected_db(event_bands, background.bands_db, s.residual_limit_db)
        laeq, laeq_flag = residual_corrected_db(np.array([event.laeq_db]),
                                                np.array([background.la90_db]),
                                                s.residual_limit_db)
        lafmax, _ = residual_corrected_db(np.array([event.lafmax_db]),
                                          np.array([background.la90_db]), s.residual_limit_db)
        at_receiver = self.propagator.to_receiver(bands)
        attenuation_a = a_weighted_total_db(bands, BAND_CENTRES_HZ) - a_weighted_total_db(
            at_receiver, BAND_CENTRES_HZ)
        estimate_db = float(laeq[0] - attenuation_a)
        site = self.site
        if site.sensor_at_or_beyond_receiver:
            judged_bands, judged_from = bands, "sensor measurement"
            level_db, lafmax_db = float(laeq[0]), float(lafmax[0])
            uncertainty = site.calibration_uncertainty_db
        else:
            judged_bands, judged_from = at_receiver, "estimate at the receiver"
            level_db, lafmax_db = estimate_db, float(lafmax[0] - attenuation_a)
            uncertainty = math.sqrt(site.calibration_uncertainty_db**2
                                    + self.propagator.distance_uncertainty_db**2
                                    + site.propagation_uncertainty_db**2)
        decision = judged_bands - s.coverage_factor * uncertainty
        disturbance = np.maximum(HEARING_THRESHOLD_DB, background.bands_db)
        margins = decision - disturbance
        vocal_margins = np.where(self.vocal, margins, -np.inf)
        best = int(np.argmax(vocal_margins))
        score = np.clip((decision - disturbance + 15.0) / 30.0, 0.0, 1.0)
        return EventAudibility(
            level_at_100ft_db=level_db,
            lafmax_at_100ft_db=lafmax_db,
            audibility_margin_db=float(vocal_margins[best]),
            plainly_audible=bool(vocal_margins[best] >= s.margin_db),
            uncertainty_db=float(uncertainty),
            audibility_score=float(score[self.vocal].max()),
            judged_from=judged_from,
            estimate_at_100ft_db=estimate_db,
            background_la90_db=background.la90_db,
            background_source=background.source,
            background_limited=bool(laeq_flag[0]),
            dominant_band_hz=float(BAND_CENTRES_HZ[best]),
            band_levels_at_100ft_db=[round(float(v), 2) for v in judged_bands],
            band_margins_db=[round(float(v), 2) for v in margins],
        )


def parameters(site: InstallationRecord, settings: AudibilitySettings) -> dict[str, object]:
    """Everything the assessment depended on, printed with every set of results."""
    from dataclasses import asdict

    return {
        "site": site.as_dict(),
        "settings": asdict(settings),
        "receiver": "100 ft (30.48 m) beyond the premises boundary",
        "background_assumption": BACKGROUND_ASSUMPTION,
        "band_centres_hz": [round(float(f), 1) for f in BAND_CENTRES_HZ],
        "hearing_threshold": "ISO 226:2003 T_f",
        "propagation": "spherical spreading, ISO 9613-1 absorption at exact mid-band "
                       "frequencies, ISO 9613-2:1996 7.3.1 ground effect, owner's-favour ends",
    }
