"""``barkwatch analyze`` on hostile files: bad samples, truncation, non-finite JSON, length."""

from __future__ import annotations

import io
import json
import logging
import math
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile

import analyzer.offline.analysis
from analyzer.offline.analysis import FileAnalysis, analyze
from analyzer.ordinance.evidence import EvidenceError, finite_json
from sensor.capture import AudioSampleError, FileSource
from sensor.wire import Frame

BARKWATCH = Path(sys.executable).parent / "barkwatch"
RATE = 16000


def _noise(seconds: float, channels: int = 1) -> np.ndarray:
    """Quiet seeded noise, ``channels`` columns."""
    rng = np.random.default_rng(7)
    return 0.01 * rng.standard_normal((round(seconds * RATE), channels))


def _write_float_wav(path: Path, samples: np.ndarray) -> Path:
    soundfile.write(path, samples, RATE, subtype="FLOAT")
    return path


def test_a_nan_sample_is_named_with_its_index_and_the_next_file_is_still_analysed(
    tmp_path: Path, excerpt_20s: Path
) -> None:
    samples = _noise(5.0)
    samples[48017, 0] = np.nan
    bad = _write_float_wav(tmp_path / "nan.wav", samples)
    result = subprocess.run([BARKWATCH, "analyze", bad, excerpt_20s], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 1  # after both files were tried
    assert f"audio file {bad}: sample 48017 (3.001 s) is nan, not a finite number" \
        in result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["file"] == str(bad)
    assert first["failure"] == {
        "reason": f"audio file {bad}: sample 48017 (3.001 s) is nan, not a finite number",
        "sample_index": 48017, "time_s": 3.001}
    assert first["frames_measured"] == 3  # the whole seconds before the bad sample are kept
    assert second["file"] == str(excerpt_20s)
    assert "failure" not in second and second["events"]


def test_an_infinite_sample_in_a_stereo_file_names_its_sample_and_channel(
    tmp_path: Path,
) -> None:
    samples = _noise(3.0, channels=2)
    samples[20000, 1] = -np.inf
    source = FileSource(_write_float_wav(tmp_path / "stereo.wav", samples))
    blocks = []
    with pytest.raises(AudioSampleError, match=r"sample 20000 \(1.250 s, channel 1\) is -inf") \
            as refused:
        for block in source:
            blocks.append(block)
    assert refused.value.sample_index == 20000
    assert len(blocks) == 1  # the first second was delivered before it


def test_a_stereo_file_says_that_its_channels_are_averaged(tmp_path: Path) -> None:
    stereo = _write_float_wav(tmp_path / "stereo.wav", _noise(2.0, channels=2))
    assert FileSource(stereo).warnings == [
        f"audio file {stereo} has 2 channels: their average is measured, as one microphone "
        "would hear them"]
    assert FileSource(stereo, channel=1).warnings == []  # one channel chosen: nothing to say


def test_a_float_file_beyond_full_scale_fails_naming_the_file_and_the_second(
    tmp_path: Path,
) -> None:
    # A DC offset of 1.5 full scale cannot be measured (the wire refuses it): the message
    # used to name only the field, not the file.
    path = _write_float_wav(tmp_path / "offset.wav", 1.5 + _noise(3.0))
    analysis = analyze(path)
    failure = analysis.document["failure"]
    assert failure["reason"].startswith(
        f"audio file {path}: the second at 0.000-1.000 s (from sample 0) cannot be measured: "
        "field 'dc': ")
    assert (failure["sample_index"], failure["time_s"]) == (0, 0.0)
    assert analysis.document["frames_measured"] == 0 and analysis.failed


def test_a_truncated_wav_is_read_with_a_warning_giving_both_lengths(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = tmp_path / "whole.wav"
    soundfile.write(whole, _noise(10.0), RATE, subtype="PCM_16")
    data = whole.read_bytes()
    truncated = tmp_path / "truncated.wav"
    truncated.write_bytes(data[: 44 + 3 * RATE * 2])  # header says 10 s, 3 s of data follow
    with caplog.at_level(logging.WARNING, logger="sensor.capture"):
        document = analyze(truncated).document
    expected = (f"audio file {truncated} is truncated: its header says 10.000 s (160000 "
                "samples), only 3.000 s (48000 samples) follow; reading what is there")
    assert document["warnings"] == [expected]
    assert expected in caplog.messages
    assert document["duration_s"] == 3.0 and "failure" not in document


def test_a_complete_file_carries_neither_warnings_nor_failure(tmp_path: Path) -> None:
    path = tmp_path / "complete.wav"
    soundfile.write(path, _noise(2.0), RATE, subtype="PCM_16")
    document = analyze(path).document
    assert "warnings" not in document and "failure" not in document


def test_the_streamed_json_line_equals_the_whole_document(tmp_path: Path) -> None:
    analysis = analyze(_write_float_wav(tmp_path / "short.wav", _noise(4.5)),
                       include_frames=True)
    out = io.StringIO()
    analysis.write_json(out)
    whole = analysis.as_dict()
    assert out.getvalue() == json.dumps(whole) + "\n"
    assert [row["t_s"] for row in whole["frames"]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    analysis.close()


def test_a_non_finite_number_is_never_written_as_json_and_is_named() -> None:
    assert finite_json({"level_db": None}) == '{"level_db": null}'
    with pytest.raises(EvidenceError, match=r"document\.audibility\.site\[1\] is nan"):
        finite_json({"audibility": {"site": [1.0, math.nan]}}, "document")
    analysis = FileAnalysis({"schema": "barkwatch.analysis/1", "max_dog_score": math.inf})
    out = io.StringIO()
    with pytest.raises(EvidenceError, match=r"document\.max_dog_score is inf"):
        analysis.write_json(out)
    assert out.getvalue() == ""  # nothing half-written


def test_the_analysis_lets_each_frame_go_once_it_is_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Memory must stay flat with the file's length: no frame outlives the next one.
    refs: list[weakref.ref[Frame]] = []
    most_alive = 0
    measured = analyzer.offline.analysis.measured_frames

    def watched(source: FileSource, full_scale_db: float, *model: str) -> Iterator[Frame]:
        nonlocal most_alive
        for frame in measured(source, full_scale_db, *model):
            most_alive = max(most_alive, sum(r() is not None for r in refs))
            refs.append(weakref.ref(frame))
            yield frame
            del frame

    monkeypatch.setattr(analyzer.offline.analysis, "measured_frames", watched)
    document = analyze(_write_float_wav(tmp_path / "long.wav", _noise(12.0)),
                       include_frames=True).as_dict()
    assert len(refs) == document["frames_measured"] == len(document["frames"]) == 12
    assert most_alive <= 1


@pytest.mark.parametrize("command", ["analyze", "evaluate"])
def test_a_full_scale_that_is_not_finite_is_refused_before_any_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    from analyzer.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--full-scale-db", "nan", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--full-scale-db: nan is not a finite number" in capsys.readouterr().err
