"""The Debian corpus's projects are either trained on or checked on, never both."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import prepare_debian_dev  # noqa: E402

CLIPS = [  # id, project, label, role
    ("zoo_owl", "zoo", "other-animal", "negative"),
    ("zoo_bark", "zoo", "bark", "positive"),
    ("zoo_forest", "zoo", "ambient", "negative"),
    ("game_bark", "game", "bark", "positive"),
    ("game_growl", "game", "growl", "dog-other"),
    ("game_door", "game", "impact", "negative"),
]


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    folder = tmp_path / "dev"
    (folder / "audio").mkdir(parents=True)
    fields = ["id", "source_group", "label", "detail", "eval_role", "license", "wav_file",
              "wav_duration_s", "duration_s"]  # fmt: skip
    with open(folder / "manifest.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        for clip_id, project, label, role in CLIPS:
            soundfile.write(folder / "audio" / f"{clip_id}.wav", np.zeros(1600), 16000)
            writer.writerow({"id": clip_id, "source_group": project, "label": label,
                             "detail": f"{label} detail", "eval_role": role, "license": "CC0",
                             "wav_file": f"audio/{clip_id}.wav", "wav_duration_s": "0.100",
                             "duration_s": "0.1"})  # fmt: skip
    with open(folder / "events.csv", "w", newline="") as handle:
        handle.write("clip_id,event_idx,onset,offset,label\n"
                     "zoo_bark,0,0.01,0.08,bark\ngame_bark,0,0.0,0.05,bark\n"
                     "game_growl,0,0.02,0.09,growl\n")  # fmt: skip
    return folder


def test_without_a_training_folder_every_clip_is_checked(dev: Path, tmp_path: Path) -> None:
    out = tmp_path / "eval"
    assert prepare_debian_dev.prepare(dev, out) == (6, 3, 0)
    assert sorted(p.name for p in out.glob("*.csv")) == [
        "game_bark.csv", "game_growl.csv", "zoo_bark.csv"]  # fmt: skip


def test_training_projects_leave_the_check(dev: Path, tmp_path: Path) -> None:
    out, train = tmp_path / "eval", tmp_path / "train"
    assert prepare_debian_dev.prepare(dev, out, train, ("zoo",)) == (3, 2, 3)
    assert sorted(p.name for p in out.iterdir()) == [
        "game_bark.csv", "game_bark.wav", "game_door.wav", "game_growl.csv", "game_growl.wav"]
    with open(train / "manifest.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["clip_id"], r["label"], r["binary"], r["group"]) for r in rows] == [
        ("debian__zoo_owl", "other_animal", "not_dog", "zoo"),
        ("debian__zoo_bark", "dog_bark", "dog", "zoo"),
        ("debian__zoo_forest", "nature_ambience", "not_dog", "zoo"),  # a mixing background
    ]  # fmt: skip
    assert all(Path(r["file"]).is_file() and r["licence"] == "CC0" for r in rows)


def test_an_unknown_training_project_is_named(dev: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no such project .*: zo \\(known: game, zoo\\)"):
        prepare_debian_dev.prepare(dev, tmp_path / "eval", tmp_path / "train", ("zo",))
