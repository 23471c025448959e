"""Checks on the committed demo recording in demo/ (built by scripts/make_demo_recording.py).

These read only the committed files, never the training corpus. Times are in seconds,
levels in dB (dBFS for sample values re full scale).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import stft

DEMO = Path(__file__).resolve().parents[1] / "demo"
FLAC = DEMO / "example.flac"
ANNOTATIONS = DEMO / "example.annotations.csv"
LICENCES = DEMO / "LICENCES.md"

SAMPLE_RATE_HZ = 16_000
PERMITTED = re.compile(r"^(CC0 1\.0|Public Domain|MIT|CC BY(?: [1-4]\.\d)?)$")
BOUT_GAP_S = 60.0  # barks closer than this belong to the same bout
BAND_HZ = (500.0, 4000.0)
MIN_BAND_MARGIN_DB = 10.0


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    """The demo mix as float64 samples in [-1, 1]."""
    samples, rate = sf.read(str(FLAC), dtype="float64")
    assert rate == SAMPLE_RATE_HZ
    return samples


@pytest.fixture(scope="module")
def spans() -> list[tuple[float, float]]:
    """Dog spans (onset_s, offset_s) from the annotation CSV, in file order."""
    with ANNOTATIONS.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == ["onset_s", "offset_s", "label"]
        rows = list(reader)
    assert rows, "no annotations"
    assert {r["label"] for r in rows} == {"dog"}
    return [(float(r["onset_s"]), float(r["offset_s"])) for r in rows]


def licence_rows() -> list[dict[str, str]]:
    """Rows of the clip table in LICENCES.md, keyed by the table's header cells."""
    lines = LICENCES.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| clip_id |"))
    header = split_row(lines[start])
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, split_row(line), strict=True)))
    return rows


def split_row(line: str) -> list[str]:
    """Cells of one Markdown table row (``\\|`` is an escaped pipe inside a cell)."""
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def test_flac_is_16k_mono_about_150_s() -> None:
    info = sf.info(str(FLAC))
    assert info.samplerate == SAMPLE_RATE_HZ
    assert info.channels == 1
    assert info.format == "FLAC"
    assert info.subtype == "PCM_16"
    assert 145.0 <= info.duration <= 155.0
    assert FLAC.stat().st_size < 3_000_000


def test_peak_is_about_minus_3_dbfs(audio: np.ndarray) -> None:
    peak_db = 20.0 * np.log10(np.max(np.abs(audio)))
    assert -3.5 <= peak_db <= -2.5


def test_spans_inside_sorted_non_overlapping(
    audio: np.ndarray, spans: list[tuple[float, float]]
) -> None:
    duration_s = len(audio) / SAMPLE_RATE_HZ
    for onset, offset in spans:
        assert 0.0 <= onset < offset <= duration_s
    for (_, prev_off), (next_on, _) in zip(spans, spans[1:], strict=False):
        assert prev_off <= next_on


def test_one_bout_of_60_to_90_s_plus_isolated_barks(spans: list[tuple[float, float]]) -> None:
    groups: list[list[tuple[float, float]]] = [[spans[0]]]
    for span in spans[1:]:
        if span[0] - groups[-1][-1][1] < BOUT_GAP_S:
            groups[-1].append(span)
        else:
            groups.append([span])
    lengths = [g[-1][1] - g[0][0] for g in groups]
    bouts = [n for n in lengths if n >= 60.0]
    assert len(bouts) == 1 and bouts[0] <= 90.0
    assert len(groups) >= 2, "expected isolated barks outside the bout"


def test_every_clip_has_a_permitted_licence() -> None:
    rows = licence_rows()
    assert rows
    text = LICENCES.read_text(encoding="utf-8")
    for row in rows:
        assert PERMITTED.match(row["licence"]), (row["clip_id"], row["licence"])
        assert row["source"], row["clip_id"]
        if row["licence"].startswith("CC BY"):
            assert " by " in row["attribution"], row["clip_id"]
        if row["licence"] == "MIT":
            assert "Permission is hereby granted" in text
    assert "CC BY 4.0" in text or "CC0 1.0" in text


def test_dog_spans_louder_in_bark_band_than_background(
    audio: np.ndarray, spans: list[tuple[float, float]]
) -> None:
    """Known answer: each dog span's mean 500-4000 Hz power beats the background median."""
    hop = 800  # 50 ms frames
    freqs, _, spec = stft(
        audio, fs=SAMPLE_RATE_HZ, nperseg=hop, noverlap=0, boundary=None, padded=False
    )
    in_band = (freqs >= BAND_HZ[0]) & (freqs <= BAND_HZ[1])
    power = np.sum(np.abs(spec[in_band]) ** 2, axis=0)
    centres = (np.arange(power.size) + 0.5) * hop / SAMPLE_RATE_HZ
    masks = [(centres >= on) & (centres < off) for on, off in spans]
    background = np.median(power[~np.logical_or.reduce(masks)])
    for (onset, offset), mask in zip(spans, masks, strict=True):
        margin_db = 10.0 * np.log10(power[mask].mean() / background)
        assert margin_db >= MIN_BAND_MARGIN_DB, (onset, offset, margin_db)
