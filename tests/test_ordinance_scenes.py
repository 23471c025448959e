"""Ordinance near-miss scenes (benchmarks/ordinance_scenes.py) through the real pipeline: dog
bouts with speech in the gaps between them.

A gap over the continuity gap (60 s) with only speech in it must stay a gap: the bouts on its
two sides are two episodes (section 701 subd. 5, "more than seven minutes continuously";
docs/RULES.md). Bouts 40 s apart are one episode, here of more than seven minutes: a finding.
The scene uses the repository's own clips (a bark from Debian's Lugaru, an IVR speech prompt,
the demo recording's bark-free background), not the corpus, so CI can run it; 16 kHz keeps it
quick. The benchmark runs the corpus's scenes at 48 kHz.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from analyzer.acoustics import InstallationRecord
from analyzer.cli.demo_scene import bark_free_pieces, load_material
from analyzer.offline.analysis import analyze_file
from benchmarks.ordinance_scenes import (
    FULL_SCALE_DB,
    SITE,
    Material,
    Scene,
    evaluate,
    plan_bouts,
    render,
)

DATA = Path(__file__).resolve().parent / "data"
RATE = 16_000
# Three bouts: A (1 min), a 90-s gap of speech, B and C (3 min 35 s each) 40 s apart. B and C
# make one episode of more than seven minutes; A joins it only if the speech bridges the gap.
BOUTS_S = [(30.0, 60.0), (180.0, 215.0), (435.0, 215.0)]
DURATION_S = 680.0


@pytest.fixture(scope="module")
def material() -> Material:
    bark, rate = sf.read(DATA / "lugaru_bark2.flac")
    speech, speech_rate = sf.read(DATA / "allison_vm_login_speech.flac")
    assert rate == speech_rate == RATE
    demo, demo_rate, spans = load_material(rate_hz=RATE)
    beds = {f"demo-bed-{k}": demo[round(a * RATE) : round(b * RATE)]
            for k, (a, b) in enumerate(bark_free_pieces(spans, len(demo) / demo_rate))}  # fmt: skip
    return Material.from_audio({"lugaru-bark": bark}, {"speech": {"allison-vm-login": speech}},
                               beds)  # fmt: skip


@pytest.fixture(scope="module")
def scene(material: Material) -> Scene:
    return plan_bouts("three-bouts", "near_continuous", 5, material, BOUTS_S, DURATION_S,
                      {"continuous": True, "intermittent": False})  # fmt: skip


@pytest.fixture(scope="module")
def analysed(scene: Scene, material: Material, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The scene's evaluation and the analysis document it judged (the pipeline runs once)."""
    path = render(scene, material, tmp_path_factory.mktemp("scene") / "scene.flac", rate_hz=RATE)
    site = InstallationRecord(device_id="scenes", source_to_sensor_m=SITE["source_to_sensor_m"],
                              source_to_boundary_m=SITE["source_to_boundary_m"],
                              ground=str(SITE["ground"]))  # fmt: skip
    document = analyze_file(path, full_scale_db=FULL_SCALE_DB, site=site)
    return evaluate(scene, document), document


def test_speech_in_a_90_s_gap_does_not_join_a_bout_to_the_next_episode(
    scene: Scene, analysed: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    result, document = analysed
    (a_start, a_end), (b_start, _) = scene.bouts[0], scene.bouts[1]
    gap = scene.gaps[0]
    assert gap[1] - gap[0] > 80 and sum(
        p.kind == "speech" and gap[0] < p.start_s < gap[1] for p in scene.placements) >= 5
    assert any(a_start - 1 <= e["onset_s"] <= a_end + 1 for e in document["events"])  # A heard
    assert result["false_events"] == 0 and result["gaps_bridged"] == 0
    (finding,) = result["findings"]
    assert finding["start_s"] >= b_start - 1  # the episode starts at B, not at A


def test_bouts_40_s_apart_are_one_continuous_finding_of_more_than_seven_minutes(
    scene: Scene, analysed: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    result, _ = analysed
    assert result["found"] == {"continuous": True, "intermittent": False}
    (finding,) = result["findings"]
    (b_start, _), (c_start, c_end) = scene.bouts[1], scene.bouts[2]
    assert abs(finding["start_s"] - b_start) < 2 and c_start < finding["end_s"] <= c_end + 1
    assert finding["duration_s"] > 420


def test_scene_audio_is_the_same_for_the_same_seed(
    scene: Scene, material: Material, tmp_path: Path
) -> None:
    a = render(scene, material, tmp_path / "a.flac", rate_hz=RATE)
    b = render(scene, material, tmp_path / "b.flac", rate_hz=RATE)
    assert np.array_equal(sf.read(a)[0], sf.read(b)[0])
