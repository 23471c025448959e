"""The demo tells the whole story (issue 21, deliverable 5): a scene with more than seven
minutes of barking made from the bundled recording, replayed through the real sensor code,
broker, analyzer and database, then a case, its verified evidence link and the report."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile
from scipy import signal

from analyzer.cli.demo import barks_in_events, reconcile_barks_and_events, run_demo
from analyzer.cli.demo_scene import (
    BARK_GAP_S,
    DEMO_ANNOTATIONS,
    SCENE_RATE_HZ,
    Scene,
    bark_free_pieces,
    load_material,
    make_scene,
    upsample,
)
from analyzer.offline import read_annotations
from tests.conftest import sine

RATE = 1000  # the scene's arithmetic does not depend on the rate; small keeps it fast


def test_bark_free_pieces_keep_the_margin_from_every_bark_and_drop_short_stretches() -> None:
    spans = [(10.0, 12.0), (30.0, 31.0), (38.0, 39.0)]
    assert bark_free_pieces(spans, 50.0, margin_s=2.0, min_length_s=5.0) == [
        (0.0, 8.0), (14.0, 28.0), (41.0, 50.0)]  # 33-36 is too short
    assert bark_free_pieces(spans, 50.0, margin_s=2.0, min_length_s=3.0) == [
        (0.0, 8.0), (14.0, 28.0), (33.0, 36.0), (41.0, 50.0)]


def _material() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """60 s of silence with two 'barks' (all ones) at 20-21 s and 40-42.5 s."""
    audio = np.zeros(60 * RATE)
    spans = [(20.0, 21.0), (40.0, 42.5)]
    for onset, offset in spans:
        audio[round(onset * RATE):round(offset * RATE)] = 0.5
    return audio, spans


def test_scene_holds_more_than_seven_minutes_of_barks_with_gaps_far_under_a_minute() -> None:
    audio, spans = _material()
    scene = make_scene(audio, RATE, spans)
    spans_s = scene.bark_spans_s
    starts = [a for a, _ in spans_s]
    gaps = [b[0] - a[1] for a, b in zip(spans_s, spans_s[1:], strict=False)]
    assert starts[0] == 20.0  # after the lead of background
    assert scene.barking_s >= 480.0  # subd. 5: more than 420 s, with a minute to spare
    assert BARK_GAP_S[0] <= min(gaps) and max(gaps) <= BARK_GAP_S[1] < 60.0
    assert scene.duration_s == pytest.approx(scene.bark_spans_s[-1][1] + 200.0, abs=1e-3)


def test_scene_places_whole_barks_and_its_background_holds_none() -> None:
    audio, spans = _material()
    scene = make_scene(audio, RATE, spans)
    barking = np.zeros(len(scene.samples), dtype=bool)
    for onset, offset in scene.bark_spans_s:
        first, last = round(onset * RATE), round(offset * RATE)
        barking[first:last] = True
        assert round(offset - onset, 3) in (1.0, 2.5)  # one of the two cuts, whole
        assert np.all(scene.samples[first + 20:last - 20] == np.float32(0.5))  # inside fades
    assert not np.any(scene.samples[~barking])  # background cut away from the barks


def test_scene_is_the_same_every_run_and_another_seed_gives_another() -> None:
    audio, spans = _material()
    first, again = make_scene(audio, RATE, spans), make_scene(audio, RATE, spans)
    assert first.bark_spans_s == again.bark_spans_s
    assert np.array_equal(first.samples, again.samples)
    assert make_scene(audio, RATE, spans, seed=1).bark_spans_s != first.bark_spans_s


def test_the_scene_material_is_the_bundled_recording_upsampled_to_the_deployment_rate() -> None:
    audio, rate_hz, spans = load_material()
    assert rate_hz == SCENE_RATE_HZ == 48000
    assert len(audio) == 150 * 48000  # the 150 s recording, every second of it
    assert spans == read_annotations(DEMO_ANNOTATIONS)  # in seconds: unchanged


def test_upsampling_keeps_a_1_khz_tone_level_and_adds_nothing_above_8_khz() -> None:
    """Known answers: a unit-RMS 1 kHz sine at 16 kHz keeps its level at 48 kHz (0.01 dB),
    and white noise at 16 kHz (the whole 0-8 kHz band full) puts no energy above 8.2 kHz
    within 100 dB of its total."""
    t = np.arange(2 * 16000) / 16000
    tone = upsample(np.sqrt(2.0) * np.sin(2.0 * np.pi * 1000.0 * t), 16000)
    middle = tone[len(tone) // 4 : 3 * len(tone) // 4]
    assert 10.0 * np.log10(np.mean(middle**2)) == pytest.approx(0.0, abs=0.01)
    noise = upsample(np.random.default_rng(3).standard_normal(4 * 16000), 16000)
    frequencies_hz, spectrum = signal.welch(noise, 48000, nperseg=4096)  # Hann: no leakage
    above_db = 10.0 * np.log10(spectrum[frequencies_hz > 8200.0].sum() / spectrum.sum())
    assert above_db < -100.0


def _pdf_text(path: Path) -> str:
    return subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_demo_links_a_verified_continuous_finding_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "report"
    assert run_demo(out=str(out)) == 0
    printed = capsys.readouterr().out
    # Measured at the deployment rate, so the sensor code warns of no class 1 shortfall.
    assert "s of audio at 48000 Hz)" in printed
    assert not [r.getMessage() for r in caplog.records if "class 1" in r.getMessage()]
    linked = re.findall(r"evidence +(\w+) demo-0001 .* digest ([0-9a-f]{64}): (.+)", printed)
    assert [(rule, state) for rule, _, state in linked] == [("continuous", "VERIFIED")]
    digest = linked[0][1]
    assert "[x] 3. shown by the records" in printed  # the earlier complaint on a prior date
    html, pdf = out / "complaint-2.html", out / "complaint-2.pdf"
    assert f"HTML: {html.resolve()}" in printed and f"PDF:  {pdf.resolve()}" in printed
    assert digest in html.read_text(encoding="utf-8")
    assert digest in "".join(_pdf_text(pdf).split())  # a long digest may wrap in the PDF


def test_demo_of_a_given_file_without_a_finding_says_it_skips_the_case_story(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "tone.wav"
    soundfile.write(recording, sine(1000.0, 0.1, 2.0, 48000), 48000)
    assert run_demo(str(recording), out=str(tmp_path / "report")) == 0
    assert "No finding, so no case story" in capsys.readouterr().out
    assert not (tmp_path / "report").exists()


def test_the_demo_ties_its_barks_to_the_events_found() -> None:
    # Three barks placed; events found over the first (split in two) and the third: the
    # console says 2 of 3 barks lie in an event, so 3 events and a longer gap are explained.
    scene = Scene(np.zeros(16000 * 60, dtype=np.float32), 16000,
                  ((1.0, 1.5), (10.0, 10.4), (20.0, 20.6)))
    events = [(0.9, 1.2), (1.25, 1.6), (19.9, 20.7)]
    assert barks_in_events(scene.bark_spans_s, events) == 2
    line = reconcile_barks_and_events(scene, events)
    assert "of the scene's 3 barks, 2 lie in an event and 1 in none" in line
    assert "longer than the scene's 10 s" in line  # 20.0 - 10.4 s


def test_a_bark_touching_an_event_only_at_its_edge_is_not_in_it() -> None:
    assert barks_in_events(((1.0, 2.0),), [(2.0, 3.0)]) == 0
    assert barks_in_events(((1.0, 2.0),), [(1.99, 3.0)]) == 1
