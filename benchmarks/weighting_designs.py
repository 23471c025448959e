"""Candidate digital A and C weighting designs: error against IEC 61672-1 Annex E and cost.

    .venv/bin/python benchmarks/weighting_designs.py [--plot docs/weighting_error.png]

For each design at 48 and 44.1 kHz: the largest |digital - analytic| in dB at the Table 3
frequencies the sensor must meet (10 Hz-16 kHz at 48 kHz, 10 Hz-12.5 kHz at 44.1 kHz,
issue 25), and the cost of the A weighting filtered one second at a time (ns per sample,
fastest of 15 runs over 10 s of noise). The chosen design is ``sensor.levels.weighting_sos``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import optimize, signal

from sensor.levels import _analog_weighting_zeros_poles, analytic_weighting_db, weighting_sos

TABLE_3_HZ = 1000.0 * 10.0 ** (np.arange(-20, 14) / 10.0)  # 10 Hz .. 20 kHz, exact base-10
TOP_HZ = {48000: 16000.0, 44100: 12600.0}
F4_RAD_S = 2.0 * np.pi * 12194.217  # Annex E


def normalise(sos: np.ndarray, fs: int) -> np.ndarray:
    _, h = signal.sosfreqz(sos, worN=[1000.0], fs=fs)
    sos = sos.copy()
    sos[0, :3] /= np.abs(h[0])
    return sos


def bilinear(weighting: str, fs: int) -> np.ndarray:
    """The previous design: every Annex E pole and zero through the bilinear transform."""
    zeros, poles = _analog_weighting_zeros_poles(weighting)
    poles = np.concatenate([poles, [-F4_RAD_S, -F4_RAD_S]])
    return normalise(signal.zpk2sos(*signal.bilinear_zpk(zeros, poles, 1.0, fs=fs)), fs)


def bilinear_plus_correction(weighting: str, fs: int) -> np.ndarray:
    """The previous design followed by a fourth biquad fitted to its error (5 coefficients)."""
    base = bilinear(weighting, fs)
    grid = np.geomspace(200.0, min(20000.0, 0.85 * fs / 2), 200)
    _, hb = signal.sosfreqz(base, worN=grid, fs=fs)
    target = analytic_weighting_db(weighting, grid) - 20 * np.log10(np.abs(hb))

    def err(p: np.ndarray) -> np.ndarray:
        _, h = signal.freqz([1.0, p[0], p[1]], [1.0, p[2], p[3]], worN=np.r_[1000.0, grid], fs=fs)
        db = 20 * np.log10(np.abs(h))
        return db[1:] - db[0] - target

    p = optimize.least_squares(err, [0.5, 0.1, -0.3, 0.05], method="lm").x
    return normalise(np.vstack([base, [1.0, p[0], p[1], 1.0, p[2], p[3]]]), fs)


def matched_z_fir(weighting: str, fs: int, taps: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Matched-z (z = exp(sT)) of every pole and zero, then a linear-phase FIR of ``taps``
    taps fitted by linear least squares to the remaining amplitude error."""
    zeros, poles = _analog_weighting_zeros_poles(weighting)
    poles = np.concatenate([poles, [-F4_RAD_S, -F4_RAD_S]])
    sos = normalise(signal.zpk2sos(np.exp(zeros / fs), np.exp(poles / fs), 1.0), fs)
    grid = np.geomspace(200.0, min(20000.0, 0.85 * fs / 2), 200)
    _, h = signal.sosfreqz(sos, worN=grid, fs=fs)
    ratio = 10 ** (analytic_weighting_db(weighting, grid) / 20) / np.abs(h)
    half = taps // 2
    w = 2 * np.pi * grid / fs
    basis = np.column_stack([np.ones_like(w)] + [2 * np.cos(k * w) for k in range(1, half + 1)])
    c = np.linalg.lstsq(basis / ratio[:, None], np.ones_like(w), rcond=None)[0]  # relative
    fir = np.concatenate([c[:0:-1], c])
    _, h1 = signal.freqz(fir, worN=[1000.0], fs=fs)
    return sos, fir / np.abs(h1[0])


def chosen(weighting: str, fs: int) -> np.ndarray:
    return weighting_sos(weighting, fs)


def error_db(sos: np.ndarray, fir: np.ndarray | None, weighting: str, fs: int,
             freqs: np.ndarray) -> np.ndarray:
    _, h = signal.sosfreqz(sos, worN=freqs, fs=fs)
    if fir is not None:
        h = h * signal.freqz(fir, worN=freqs, fs=fs)[1]
    return 20 * np.log10(np.abs(h)) - analytic_weighting_db(weighting, freqs)


def cost_ns_per_sample(sos: np.ndarray, fir: np.ndarray | None, fs: int) -> float:
    """Fastest of 15 runs over 10 s of noise, one call per second of audio (the machine is
    shared: the fastest run is the one least disturbed)."""
    x = np.random.default_rng(0).standard_normal(10 * fs)
    best = np.inf
    for _ in range(15):
        started = time.perf_counter()
        for second in range(10):
            y = signal.sosfilt(sos, x[second * fs : (second + 1) * fs])
            if fir is not None:
                y = np.convolve(y, fir)
        best = min(best, time.perf_counter() - started)
    return best / x.size * 1e9


DESIGNS: dict[str, Callable[[str, int], np.ndarray | tuple[np.ndarray, np.ndarray]]] = {
    "bilinear (before)": bilinear,
    "bilinear + fitted correction biquad": bilinear_plus_correction,
    "matched-z + 7-tap FIR": matched_z_fir,
    "bilinear low part + fitted f4 biquad (chosen)": chosen,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", help="write the A-weighting error plot (PNG) here")
    args = parser.parse_args()
    curves = {}
    print("design | fs | max |error| A, C (dB, Table 3 in range) | sections | ns/sample (A)")
    for name, design in DESIGNS.items():
        for fs in (48000, 44100):
            freqs = TABLE_3_HZ[np.less_equal(TABLE_3_HZ, TOP_HZ[fs])]
            worst = []
            for weighting in ("A", "C"):
                made = design(weighting, fs)
                sos, fir = made if isinstance(made, tuple) else (made, None)
                worst.append(np.max(np.abs(error_db(sos, fir, weighting, fs, freqs))))
                if weighting == "A":
                    cost = cost_ns_per_sample(sos, fir, fs)
                    taps = f" + {fir.size} taps" if fir is not None else ""
                    sections = f"{sos.shape[0]}{taps}"
                    dense = np.geomspace(10.0, 0.98 * fs / 2, 400)
                    curves[(name, fs)] = (dense, error_db(sos, fir, "A", fs, dense))
            print(f"{name} | {fs} | {worst[0]:.3f}, {worst[1]:.3f} | {sections} | {cost:.1f}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
        for ax, fs in zip(axes, (48000, 44100), strict=True):
            for name in DESIGNS:
                f, e = curves[(name, fs)]
                ax.semilogx(f, e, label=name)
            ax.axhspan(-0.1, 0.1, color="0.85", zorder=0)
            ax.axvline(TOP_HZ[fs], color="0.5", ls=":")
            ax.set_ylim(-1.0, 1.0)
            ax.set_title(f"A weighting at {fs / 1000:g} kHz")
            ax.set_xlabel("frequency (Hz)")
            ax.grid(True, which="both", lw=0.3)
        axes[0].set_ylabel("digital - Annex E (dB)")
        axes[0].legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=80)


if __name__ == "__main__":
    main()
