"""The analyzer's journal of each device's analysis state (analyzer/ingest/journal.py): a
restarted analyzer continues scoring, event tracking and ordering where the killed one was."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
import pytest
import soundfile

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.detect import DetectorSettings, DevicePipeline
from analyzer.ingest import Analyzer
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal import (
    KEEP_STORED_S,
    DeviceJournal,
    HeldChanges,
    device_state_blob,
)
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ordinance import EvidenceChain
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.wire import Frame, encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine, wait_until

START_NS = 1_780_351_200_000_000_000
NS = 1_000_000_000


def _frames(path: Path, device: str = "j-1") -> list[Frame]:
    audio, rate = soundfile.read(path, dtype="float64")
    return list(frames_from_samples(audio, rate, 100.0, device_id=device, start_ns=START_NS))


def _scores_and_events(pipeline: DevicePipeline, frames: list[Frame]
                       ) -> tuple[list[np.ndarray], list[tuple[int, int, float]]]:
    scores, events = [], []
    for frame in frames:
        result = pipeline.feed(frame)
        scores.append(result.step_scores)
        events += [(e.onset_ns, e.offset_ns, e.confidence) for e in result.events]
    return scores, events


def test_a_pipeline_restored_from_its_checkpoint_scores_and_tracks_as_the_uninterrupted_one(
    excerpt_20s: Path,
) -> None:
    frames = _frames(excerpt_20s)
    whole_scores, whole_events = _scores_and_events(DevicePipeline("j-1", DetectorSettings()),
                                                    frames)
    assert whole_events  # the excerpt barks
    cut = (whole_events[0][0] - START_NS) // NS + 1  # stopped with the first event open
    first = DevicePipeline("j-1", DetectorSettings())
    before_scores, before_events = _scores_and_events(first, frames[:cut])
    assert before_events == []  # the event is still open at the cut
    saved = pickle.loads(pickle.dumps(first.checkpoint()))  # as the journal stores it
    second = DevicePipeline("j-1", DetectorSettings())
    second.restore(saved)
    after_scores, after_events = _scores_and_events(second, frames[cut:])
    assert after_events == whole_events
    assert all(np.array_equal(a, b) for a, b in
               zip(before_scores + after_scores, whole_scores, strict=True))


def test_a_checkpoint_with_a_part_the_pipeline_lacks_is_refused() -> None:
    pipeline = DevicePipeline("j-1", DetectorSettings())
    with pytest.raises(ValueError, match="unknown part"):
        pipeline.restore({"_no_such_state": 1})


def _analysis(settings: DetectorSettings | None = None) -> DeviceAnalysis:
    config = AnalyzerConfig(detector=settings or DetectorSettings())
    return DeviceAnalysis("j-1", config, None, EvidenceChain())


def test_the_journal_gives_back_the_saved_state_and_the_stored_frames(tmp_path: Path) -> None:
    reorder = ReorderBuffer(120, 30.0)
    analysis = _analysis()
    frames = list(frames_from_samples(sine(1000.0, 0.1, 3.0, 16000), 16000, 100.0,
                                      device_id="j-1", start_ns=START_NS))
    reorder.push(frames[0])
    reorder.push(frames[2])  # waits for frame 1
    analysis.feed(frames[0])
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    journal.save({"j-1": device_state_blob(reorder, 2, frames[0].end_ns, analysis)},
                 [("j-1", 0, frames[0].capture_ns), ("j-1", 2, frames[2].capture_ns)],
                 HeldChanges(added=[("j-1", frames[2])]))
    journal.close()
    (saved,), problems = DeviceJournal(tmp_path / "journal.sqlite").load()
    assert problems == []
    assert (saved.device, saved.implausible, saved.fed_end_ns) == ("j-1", 2, frames[0].end_ns)
    assert saved.stored == [(0, frames[0].capture_ns), (2, frames[2].capture_ns)]
    assert saved.reorder.next_seq == 1 and saved.reorder.waiting == 0  # held apart
    assert [f.seq for f in saved.held] == [2]
    saved.reorder.hold_again(saved.held, 0.0)
    assert [f.seq for f in saved.reorder.push(frames[1])] == [1, 2]
    fresh = _analysis()
    assert saved.restore_into(fresh)
    assert fresh.pipeline.checkpoint().keys() == analysis.pipeline.checkpoint().keys()


def test_a_state_saved_with_other_detector_settings_is_not_restored(tmp_path: Path) -> None:
    analysis = _analysis()
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    journal.save({"j-1": device_state_blob(ReorderBuffer(120), 0, START_NS, analysis)}, [])
    (saved,), _ = journal.load()
    other = _analysis(dataclasses.replace(DetectorSettings(), min_duration_s=0.5))
    before = other.pipeline.checkpoint()
    assert not saved.restore_into(other)
    assert other.pipeline.checkpoint().keys() == before.keys()
    assert other.pipeline.tracker is None  # still fresh


def test_a_forgotten_device_leaves_the_journal(tmp_path: Path) -> None:
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    journal.save({"j-1": device_state_blob(ReorderBuffer(120), 0, None, None)},
                 [("j-1", 0, START_NS)])
    journal.save({"j-1": None}, [])
    assert journal.load() == ([], [])


def test_stored_frame_keys_older_than_the_kept_span_are_trimmed(tmp_path: Path) -> None:
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    blob = device_state_blob(ReorderBuffer(120), 0, None, None)
    journal.save({"j-1": blob}, [("j-1", s, START_NS + s * NS) for s in range(3)])
    newest = KEEP_STORED_S + 1
    journal.save({"j-1": blob}, [("j-1", newest, START_NS + newest * NS)])
    (saved,), _ = journal.load()
    assert [seq for seq, _ in saved.stored] == [1, 2, newest]  # 0 is more than 600 s older


def test_an_unreadable_saved_state_is_named_and_that_device_left_out(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    journal = DeviceJournal(path)
    journal.save({"good": device_state_blob(ReorderBuffer(120), 0, None, None),
                  "bad": device_state_blob(ReorderBuffer(120), 0, None, None)}, [])
    journal.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE device_state SET state = x'00' WHERE device = 'bad'")
    saved, problems = DeviceJournal(path).load()
    assert [s.device for s in saved] == ["good"]
    assert len(problems) == 1 and problems[0].startswith("bad: UnpicklingError")


def _config(services: Services, journal: Path) -> AnalyzerConfig:
    return AnalyzerConfig(
        max_frame_age_s=315_360_000.0, reorder_wait_s=3600.0, journal_path=str(journal),
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
    )


def _payloads(device: str, seconds: int) -> list[bytes]:
    return [encode_frame(f) for f in frames_from_samples(
        sine(1000.0, 0.1, float(seconds), 16000), 16000, 100.0, device_id=device,
        start_ns=START_NS)]


def test_a_frame_stored_before_a_restart_is_a_duplicate_after_it(services: Services,
                                                                   tmp_path: Path) -> None:
    config = _config(services, tmp_path / "journal.sqlite")
    payloads = _payloads("j-dup", 6)
    publish_through_analyzer(config, frame_topic("j-dup"), payloads[:5], stored=5)
    restarted = publish_through_analyzer(config, frame_topic("j-dup"),
                                         [payloads[3], payloads[5]], stored=1)
    assert restarted.counters.devices_resumed == 1
    assert restarted.counters.duplicates == 1
    assert restarted.counters.late_frames == 0


def test_a_frame_held_for_its_predecessor_is_scored_after_a_restart(services: Services,
                                                                    tmp_path: Path) -> None:
    config = _config(services, tmp_path / "journal.sqlite")
    payloads = _payloads("j-held", 4)
    first = publish_through_analyzer(config, frame_topic("j-held"),
                                     [payloads[0], payloads[1], payloads[3]], stored=3)
    assert first.counters.frames_held == 1  # frame 3 waits, stored unscored and acknowledged
    publish_through_analyzer(config, frame_topic("j-held"), [payloads[2]], stored=1)
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query("SELECT seq, max_dog_score FROM level WHERE device = 'j-held'")
    scores = {row[1]: row[2] for row in series[0]["values"]}
    assert sorted(scores) == [0, 1, 2, 3]
    assert scores[3] is not None  # released by frame 2 in the restarted analyzer


def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _bad_header(path: Path) -> None:
    with open(path, "r+b") as file:
        file.write(b"not a sqlite fil")


def _garbage_pages(path: Path) -> None:
    with open(path, "r+b") as file:
        file.seek(2 * 4096)
        file.write(np.random.default_rng(32).bytes(4 * 4096))


def _wrong_schema(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE device_state (x)")


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("kept")


@pytest.mark.parametrize("damage", [_truncated, _bad_header, _garbage_pages, _wrong_schema,
                                    _directory])
def test_a_damaged_journal_is_set_aside_and_storage_goes_on(
    services: Services, tmp_path: Path, damage: Callable[[Path], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "journal.sqlite"
    journal = DeviceJournal(path)  # a real journal of a few pages, then damaged
    journal.save({"j-old": device_state_blob(ReorderBuffer(120), 0, None, None)},
                 [("j-old", s, START_NS + s * NS) for s in range(3000)])
    journal.close()
    damage(path)
    damaged_kind = "dir" if path.is_dir() else path.read_bytes()
    caplog.set_level(logging.WARNING, logger="analyzer.ingest.service")
    analyzer = publish_through_analyzer(_config(services, path), frame_topic("j-new"),
                                        _payloads("j-new", 3), stored=3)
    assert analyzer.failure is None
    assert analyzer.counters.journal_set_aside == 1 and analyzer.counters.journal_off == 0
    (aside,) = tmp_path.glob("journal.sqlite.damaged-*")
    assert ("dir" if aside.is_dir() else aside.read_bytes()) == damaged_kind  # kept as found
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(str(path) in m and str(aside) in m and "set aside" in m for m in errors)
    (saved,), problems = DeviceJournal(path).load()  # the new journal took over
    assert saved.device == "j-new" and problems == []


def test_an_emptied_journal_says_every_device_starts_afresh(
    services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(b"")
    caplog.set_level(logging.WARNING, logger="analyzer.ingest.service")
    analyzer = publish_through_analyzer(_config(services, path), frame_topic("j-e"),
                                        _payloads("j-e", 1), stored=1)
    assert analyzer.counters.journal_set_aside == 0
    assert any("holds no saved state" in r.getMessage() and "starts afresh" in r.getMessage()
               for r in caplog.records)


def _journal_numbers(path: Path) -> tuple[int, int, int]:
    """(held frame rows, largest device state blob, pages in use) of the journal at ``path``,
    read beside the running analyzer."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        held = db.execute("SELECT count(*) FROM held_frames").fetchone()[0]
        blob = db.execute("SELECT max(length(state)) FROM device_state").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
    finally:
        db.close()
    return held, blob, pages


def test_held_frames_are_rows_written_once_and_deleted_when_released(
    services: Services, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite"
    config = _config(services, path)
    payloads = _payloads("j-many", 102)
    analyzer = Analyzer(config)
    analyzer.start()
    publisher = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
    publisher.connect(config.mqtt.host, config.mqtt.port)
    publisher.loop_start()
    try:
        wait_until(analyzer.connected.is_set, what="the analyzer to connect")
        for payload in payloads[:1] + payloads[2:]:  # frame 1 missing: 100 frames wait for it
            publisher.publish(frame_topic("j-many"), payload, qos=1).wait_for_publish(10)
        wait_until(lambda: analyzer.counters.frames_stored == 101, what="100 held frames")
        held, blob, pages_held = _journal_numbers(path)
        assert held == 100
        assert blob < 64 * 1024  # the device's state without the frames (each ~25 KB)
        publisher.publish(frame_topic("j-many"), payloads[1], qos=1).wait_for_publish(10)
        wait_until(lambda: analyzer.counters.frames_stored == 102, what="frame 1 stored")
        held, _, pages_released = _journal_numbers(path)
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        analyzer.stop()
    assert held == 0
    assert pages_released < pages_held / 2  # freed pages handed back: the file shrinks
    assert path.stat().st_size <= pages_released * 4096 + 4096


def test_a_restart_restores_each_device_on_first_use_not_all_before_storing(
    services: Services, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite"
    config = _config(services, path)
    analysis = _analysis()
    analysis.feed(next(iter(frames_from_samples(sine(1000.0, 0.1, 1.0, 16000), 16000, 100.0,
                                                device_id="j-1", start_ns=START_NS))))
    blob = device_state_blob(ReorderBuffer(120), 0, START_NS + NS, analysis)
    journal = DeviceJournal(path)
    journal.save({f"quiet-{i}": blob for i in range(300)}, [])
    journal.close()
    restarted = publish_through_analyzer(config, frame_topic("j-new"), _payloads("j-new", 2),
                                         stored=2)
    assert restarted.counters.devices_resumed == 300
    # No device was primed from InfluxDB (three queries each) before storing resumed: the
    # 300 quiet ones wait, restored, for their next frame.
    primed = [d for d, s in restarted._devices.items() if s.analysis is not None]
    assert primed == ["j-new"]
    assert all(restarted._devices[f"quiet-{i}"].resume is not None for i in range(300))
    (quiet,) = [s for s in DeviceJournal(path).load()[0] if s.device == "quiet-7"]
    assert quiet.pipeline is not None  # still restorable
