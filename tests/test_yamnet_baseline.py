"""The untouched-YAMNet baseline (training/yamnet_baseline.py) on a tiny corpus of real clips
whose answers are known: its figures, its per-source table and its refusals."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from training import yamnet_baseline

DATA = Path(__file__).resolve().parent / "data"
SR = 16_000


def tiny_corpus(folder: Path) -> Path:
    """Two barks (in quiet noise) from source "barks", a tone and speech from source "other"."""
    bark, _ = sf.read(DATA / "lugaru_bark2.flac")
    rng = np.random.default_rng(1)
    clips = {}
    for k in range(2):
        samples = 0.001 * rng.standard_normal(SR)
        samples[4_000 + 500 * k : 4_000 + 500 * k + bark.size] += bark
        clips[f"bark{k}"] = (samples, "dog", "barks")
    t = np.arange(2 * SR) / SR
    clips["tone"] = (0.3 * np.sin(2 * np.pi * 1000 * t), "not_dog", "other")
    clips["speech"] = (sf.read(DATA / "allison_vm_login_speech.flac")[0], "not_dog", "other")
    folder.mkdir()
    with (folder / "manifest.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["clip_id", "binary", "group", "file", "source"])
        for name, (samples, binary, source) in clips.items():
            sf.write(folder / f"{name}.flac", samples, SR)
            writer.writerow([name, binary, name, f"{name}.flac", source])
    return folder


def test_barks_outscore_a_tone_and_speech_so_the_baseline_is_perfect(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert yamnet_baseline.main([str(tiny_corpus(tmp_path / "tiny")), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["pooled"]["dog"] == 2 and report["pooled"]["not_dog"] == 2
    assert report["pooled"]["auprc"] == 1.0
    table = report["leave_one_source_out"]
    assert set(table) == {"tiny/barks", "tiny/other"}
    assert table["tiny/barks"]["dog_recall_at_pooled_2%_fa"] == 1.0
    assert table["tiny/barks"]["auprc"] is None  # one class only
    assert table["tiny/other"]["false_alarms_at_pooled_2%_fa"] == 0.0


def test_a_folder_without_a_manifest_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        yamnet_baseline.main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert f"{tmp_path}: no manifest.csv" in capsys.readouterr().err
