"""The analyzer's journal of each device's analysis state (analyzer/ingest/journal.py): a
restarted analyzer continues scoring, event tracking and ordering where the killed one was."""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import resource
import signal
import sqlite3
import struct
from collections import deque
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import paho.mqtt.client as mqtt
import pytest
import soundfile

from analyzer.acoustics import InstallationRecord, site_template
from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.detect import DetectorSettings, DevicePipeline
from analyzer.ingest import Analyzer
from analyzer.ingest import journal as journal_module
from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal import DeviceJournal, JournalError, UnsaveableState
from analyzer.ingest.journal_format import (
    FORMAT,
    HEADER,
    StateEncoder,
    read_records,
    record,
    unpack,
)
from analyzer.ingest.ordering import ReorderBuffer
from analyzer.ingest.saved import KEEP_STORED_S, LiveDevice
from analyzer.ordinance import EvidenceChain
from analyzer.store import load_events
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.wire import Frame, decode_frame, encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine, wait_until

START_NS = 1_780_351_200_000_000_000
NS = 1_000_000_000


def _frames(path: Path, device: str = "j-1") -> list[Frame]:
    audio, rate = soundfile.read(path, dtype="float64")
    return list(frames_from_samples(audio, rate, 100.0, device_id=device, start_ns=START_NS))


def _received(frames: list[Frame]) -> list[tuple[Frame, bytes]]:
    """Each frame as the analyzer receives it: decoded from its wire payload, and the payload
    (what the journal keeps of a frame fed, and feeds again at a restart)."""
    payloads = [encode_frame(f) for f in frames]
    return [(decode_frame(p), p) for p in payloads]


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
    journal.save({"j-1": LiveDevice(reorder, 2, frames[0].end_ns, analysis)},
                 [("j-1", 0, frames[0].capture_ns), ("j-1", 2, frames[2].capture_ns)])
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
    journal.save({"j-1": LiveDevice(ReorderBuffer(120), 0, START_NS, analysis)}, [])
    journal.close()
    (saved,), _ = DeviceJournal(tmp_path / "journal.sqlite").load()
    other = _analysis(dataclasses.replace(DetectorSettings(), min_duration_s=0.5))
    before = other.pipeline.checkpoint()
    assert not saved.restore_into(other)
    assert other.pipeline.checkpoint().keys() == before.keys()
    assert other.pipeline.tracker is None  # still fresh


def test_a_forgotten_device_leaves_the_journal(tmp_path: Path) -> None:
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    journal.save({"j-1": LiveDevice(ReorderBuffer(120), 0, None, None)},
                 [("j-1", 0, START_NS)])
    journal.save({"j-1": None}, [])
    journal.close()
    assert DeviceJournal(tmp_path / "journal.sqlite").load() == ([], [])


def test_stored_frame_keys_older_than_the_kept_span_are_trimmed(tmp_path: Path) -> None:
    journal = DeviceJournal(tmp_path / "journal.sqlite")
    live = LiveDevice(ReorderBuffer(120), 0, None, None)
    journal.save({"j-1": live}, [("j-1", s, START_NS + s * NS) for s in range(3)])
    newest = KEEP_STORED_S + 1
    journal.save({"j-1": live}, [("j-1", newest, START_NS + newest * NS)])
    journal.close()
    (saved,), _ = DeviceJournal(tmp_path / "journal.sqlite").load()
    assert [seq for seq, _ in saved.stored] == [1, 2, newest]  # 0 is more than 600 s older


def test_a_saved_state_of_a_class_this_code_lacks_is_named_and_that_device_afresh(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite"
    encoder = StateEncoder()
    gone = [msgpack.ExtType(5, b"analyzer.no_such_module:Gone"), {}]  # a class and its state
    change = {"r": {k: v for k, v in vars(ReorderBuffer(120)).items() if k != "_waiting"},
              "i": 0, "f": START_NS, "full": True}
    parts = {"=": ["V", {"tracker": gone}, {}]}
    bad = change | {"det": {"full": True, "ctx": "x", "p": encoder.pack(parts)}}
    payload = encoder.pack({"k": "save", "d": {"good": change, "bad": bad}, "s": []})
    path.write_bytes(HEADER + record(payload))
    saved, problems = DeviceJournal(path).load()
    assert sorted(s.device for s in saved) == ["bad", "good"]  # ordering and keys resume
    assert [s.pipeline for s in saved] == [None, None]  # detection starts afresh
    (problem,) = problems
    assert problem.startswith("bad: its detection state cannot be read")
    assert "analyzer.no_such_module:Gone" in problem


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


def _future_format(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(HEADER) - 4:len(HEADER)] = struct.pack(">I", FORMAT + 1)
    path.write_bytes(bytes(data))


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("kept")


@pytest.mark.parametrize("damage", [_truncated, _bad_header, _garbage_pages, _wrong_schema,
                                    _future_format, _directory])
def test_a_damaged_journal_is_set_aside_and_storage_goes_on(
    services: Services, tmp_path: Path, damage: Callable[[Path], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "journal.sqlite"
    journal = DeviceJournal(path)  # a real journal of one record of 3,000 keys, then damaged
    journal.save({"j-old": LiveDevice(ReorderBuffer(120), 0, None, None)},
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


def _record_sizes(path: Path) -> list[int]:
    """The payload size of each record of the journal at ``path``, read beside the running
    analyzer."""
    with open(path, "rb") as file:
        file.seek(len(HEADER))
        return [len(payload) for _, payload in read_records(file)]


def test_held_frames_are_written_once_and_gone_once_released(
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
        for payload in payloads[:1] + payloads[2:52]:  # frame 1 missing: the others wait
            publisher.publish(frame_topic("j-many"), payload, qos=1).wait_for_publish(10)
        wait_until(lambda: analyzer.counters.frames_stored == 51, what="50 held frames")
        for payload in payloads[52:]:
            publisher.publish(frame_topic("j-many"), payload, qos=1).wait_for_publish(10)
        wait_until(lambda: analyzer.counters.frames_stored == 101, what="100 held frames")
        held_sizes = _record_sizes(path)
        publisher.publish(frame_topic("j-many"), payloads[1], qos=1).wait_for_publish(10)
        wait_until(lambda: analyzer.counters.frames_stored == 102, what="frame 1 stored")
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        analyzer.stop()
    frame = decode_frame(payloads[2])
    frame_bytes = len(StateEncoder().pack(frame))
    # Each held frame is in one record only: all the records together hold the 100 frames
    # about once, not once per save (each save was the whole state before issue 32, 4).
    assert len(held_sizes) >= 2
    assert sum(held_sizes) < 100 * frame_bytes + 4 * 1024 * len(held_sizes), (
        frame_bytes, held_sizes)
    (saved,), _ = DeviceJournal(path).load()
    assert saved.held == [] and saved.reorder.next_seq == 102


def test_a_restart_restores_each_device_on_first_use_not_all_before_storing(
    services: Services, tmp_path: Path
) -> None:
    path = tmp_path / "journal.sqlite"
    config = _config(services, path)
    analysis = _analysis()
    analysis.feed(next(iter(frames_from_samples(sine(1000.0, 0.1, 1.0, 16000), 16000, 100.0,
                                                device_id="j-1", start_ns=START_NS))))
    live = LiveDevice(ReorderBuffer(120), 0, START_NS + NS, analysis)
    journal = DeviceJournal(path)
    journal.save({f"quiet-{i}": live for i in range(300)}, [])
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


# --- the incremental format (issue 37, item 2) ---------------------------------------------

SITE = InstallationRecord(device_id="j-1", source_to_sensor_m=8.0, source_to_boundary_m=12.0)


def _sited() -> DeviceAnalysis:
    return DeviceAnalysis("j-1", AnalyzerConfig(), SITE, EvidenceChain())


def _assert_same(live: object, restored: object, where: str) -> None:
    """Every attribute of ``live`` and ``restored``, recursively, equal (arrays by value and
    dtype); the assertion names the first one that is not."""
    assert type(live) is type(restored), f"{where}: {type(live)} != {type(restored)}"
    if isinstance(live, np.ndarray):
        assert live.dtype == restored.dtype and np.array_equal(live, restored, equal_nan=True), \
            where  # type: ignore[attr-defined]
    elif isinstance(live, (list, tuple, deque)):
        assert len(live) == len(restored), f"{where}: {len(live)} != {len(restored)} entries"  # type: ignore[arg-type]
        for i, (a, b) in enumerate(zip(live, restored, strict=True)):  # type: ignore[call-overload]
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(live, dict):
        assert live.keys() == restored.keys(), f"{where}: keys differ"  # type: ignore[attr-defined]
        for k in live:
            _assert_same(live[k], restored[k], f"{where}[{k!r}]")  # type: ignore[index]
    elif hasattr(live, "__dict__") and type(live).__module__.startswith(("analyzer.", "sensor.")):
        _assert_same(vars(live), vars(restored), where)
    elif isinstance(live, float) and np.isnan(live):
        assert np.isnan(restored), where  # type: ignore[call-overload]
    else:
        assert live == restored, f"{where}: {live!r} != {restored!r}"


def _restored(path: Path) -> DeviceAnalysis:
    (saved,), problems = DeviceJournal(path).load()
    assert problems == []
    fresh = _sited()
    assert saved.restore_into(fresh), saved.refusal
    return fresh


def _sited_journal(tmp_path: Path, checkpoint_frames: int = 60
                   ) -> tuple[DeviceAnalysis, ReorderBuffer, Path, DeviceJournal]:
    """A sited device's analysis and reorder buffer, and a new journal in ``tmp_path``."""
    path = tmp_path / "journal"
    return _sited(), ReorderBuffer(120, 30.0), path, DeviceJournal(path, checkpoint_frames)


def _feed_and_save(journal: DeviceJournal, reorder: ReorderBuffer, analysis: DeviceAnalysis,
                   frame: Frame, payload: bytes) -> None:
    """One frame of device j-1 (decoded from ``payload``) through its reorder buffer and
    analysis, then saved with its payload, as the analyzer's worker does."""
    reorder.push(frame)
    analysis.feed(frame)
    journal.save({"j-1": LiveDevice(reorder, 0, frame.end_ns, analysis, fed=[payload])},
                 [("j-1", frame.seq, frame.capture_ns)])


def _kinds(path: Path, device: str = "j-1") -> str:
    """Each record's entry for ``device``: C a checkpoint of its detection state, F frames'
    payloads, - neither (a rewrite's record of the device counts as its save's)."""
    with open(path, "rb") as file:
        file.seek(len(HEADER))
        records = [unpack(p) for _, p in read_records(file)]
    changes = [r["d"].get(device, {}) if r["k"] == "save" else r["c"] for r in records
               if r["k"] == "save" or r["device"] == device]
    return "".join("C" if "det" in c else "F" if "fed" in c else "-" for c in changes)


@pytest.mark.parametrize("checkpoint_frames", [0, 1, 3, 60])
def test_every_attribute_of_the_pipeline_and_assessor_comes_back_after_every_frame(
    excerpt_20s: Path, tmp_path: Path, checkpoint_frames: int,
) -> None:
    # Found, not listed: an attribute a later change adds to the assessor, its background
    # tracker or the pipeline is saved without a change to the journal, or this fails here.
    # Restored at every frame: before, at and after each checkpoint (every 3rd frame; every
    # frame, as format 4 saved; none but the first in 20 frames), the frames since it fed again.
    received = _received(_frames(excerpt_20s))
    analysis, reorder, path, journal = _sited_journal(tmp_path, checkpoint_frames)
    for frame, payload in received:
        _feed_and_save(journal, reorder, analysis, frame, payload)
        restored = _restored(path)
        _assert_same(vars(analysis.pipeline), vars(restored.pipeline), "pipeline")
        _assert_same(vars(analysis.assessor), vars(restored.assessor), "assessor")
    assert analysis.assessor is not None and len(analysis.assessor.background._all) == 20
    expected = {0: "C" * 20, 1: "C" * 20, 3: "CFF" * 6 + "CF",
                60: "C" + "F" * 19}[checkpoint_frames]
    assert _kinds(path) == expected


def test_between_checkpoints_a_save_holds_the_frame_payload_and_a_restart_feeds_it_again(
    excerpt_20s: Path, tmp_path: Path,
) -> None:
    received = _received(_frames(excerpt_20s))[:5]
    analysis, reorder, path, journal = _sited_journal(tmp_path, 3)
    for frame, payload in received:
        _feed_and_save(journal, reorder, analysis, frame, payload)
    journal.close()
    assert _kinds(path) == "CFFCF"
    sizes = _record_sizes(path)
    assert sizes[4] < len(received[4][1]) + 200  # the payload and a few integers
    (saved,), _ = DeviceJournal(path).load()
    assert saved.frames == [received[4][1]]  # fed after the second checkpoint
    fresh = _sited()
    assert saved.restore_into(fresh) and saved.replayed == 1
    _assert_same(vars(analysis.assessor), vars(fresh.assessor), "assessor")


def test_a_state_this_code_cannot_journal_is_refused_by_name(tmp_path: Path) -> None:
    analysis = _sited()
    assert analysis.assessor is not None
    analysis.assessor.background.seen = {1, 2}  # a set: no journal encoding for it
    journal = DeviceJournal(tmp_path / "journal")
    with pytest.raises(UnsaveableState, match="j-1: .*builtins:set"):
        journal.save({"j-1": LiveDevice(ReorderBuffer(120), 0, START_NS, analysis)}, [])


def test_a_state_with_other_attributes_than_the_code_keeps_is_not_restored(
    tmp_path: Path,
) -> None:
    analysis = _sited()
    assert analysis.assessor is not None
    analysis.assessor.background._later = deque([(START_NS, 40.0)])  # a later version's
    journal = DeviceJournal(tmp_path / "journal")
    journal.save({"j-1": LiveDevice(ReorderBuffer(120), 0, START_NS, analysis)}, [])
    journal.close()
    (saved,), _ = DeviceJournal(tmp_path / "journal").load()
    assert not saved.restore_into(_sited())  # this version keeps no _later
    assert "assessor.background._later" in saved.refusal


def _events(analysis: DeviceAnalysis, frames: list[Frame]) -> list[str]:
    lines = []
    for frame in frames:
        out = analysis.feed(frame)
        lines += [p.to_line_protocol() for p in out.points
                  if p.to_line_protocol().startswith("dog_event")]
    return lines


def test_a_frame_journalled_after_the_checkpoint_that_cannot_be_decoded_refuses_the_state(
    excerpt_20s: Path, tmp_path: Path,
) -> None:
    received = _received(_frames(excerpt_20s))[:3]
    analysis, reorder, path, journal = _sited_journal(tmp_path)
    for frame, payload in received[:2]:
        _feed_and_save(journal, reorder, analysis, frame, payload)
    _feed_and_save(journal, reorder, analysis, received[2][0], b"\x92not a frame")
    journal.close()
    (saved,), problems = DeviceJournal(path).load()
    assert problems == [] and len(saved.frames) == 2
    fresh = _sited()
    assert not saved.restore_into(fresh)
    assert "cannot be decoded" in saved.refusal and saved.replayed == 0
    assert fresh.pipeline.tracker is None  # untouched: detection starts afresh


def test_a_restart_mid_stream_gives_the_events_and_audibility_of_an_uninterrupted_run(
    excerpt_20s: Path, tmp_path: Path,
) -> None:
    received = _received(_frames(excerpt_20s))
    frames = [frame for frame, _ in received]
    whole = _events(_sited(), frames)
    assert whole  # the excerpt barks, and each event has its audibility
    for cut in (3, 6, 11, 17):  # 2, 1, 2 and 0 frames after a checkpoint (every 4th)
        path = tmp_path / f"journal-{cut}"
        first, reorder = _sited(), ReorderBuffer(120, 30.0)
        journal = DeviceJournal(path, 4)
        before = []
        for frame, payload in received[:cut]:
            reorder.push(frame)
            before += _events(first, [frame])
            journal.save({"j-1": LiveDevice(reorder, 0, frame.end_ns, first, fed=[payload])},
                         [("j-1", frame.seq, frame.capture_ns)])
        journal.close()  # killed here
        assert before + _events(_restored(path), frames[cut:]) == whole, cut


def _saves(path: Path, frames: list[Frame], checkpoint_frames: int = 60) -> list[int]:
    """Save a sited device after each frame (received as its wire payload); the file's size
    after each save."""
    analysis, reorder = _sited(), ReorderBuffer(120, 30.0)
    journal = DeviceJournal(path, checkpoint_frames)
    sizes = []
    for frame, payload in _received(frames):
        _feed_and_save(journal, reorder, analysis, frame, payload)
        sizes.append(path.stat().st_size)
    journal.close()
    return sizes


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
@pytest.mark.parametrize("damaged_save", [4, 5])  # a checkpoint's record, a frame's record
def test_a_damaged_record_ends_the_replay_at_the_last_good_state(
    tmp_path: Path, damage: str, damaged_save: int
) -> None:
    frames = list(frames_from_samples(sine(1000.0, 0.1, 5.0, 16000), 16000, 100.0,
                                      device_id="j-1", start_ns=START_NS))
    path = tmp_path / "journal"
    sizes = _saves(path, frames, checkpoint_frames=3)
    assert _kinds(path) == "CFFCF"
    good = damaged_save - 1  # saves before the damaged one
    if damage == "truncated":
        os.truncate(path, sizes[good - 1] + 10)  # that save cut short
    else:
        _flip_byte(path, sizes[good - 1] + 40)  # a bit of that save's payload
    journal = DeviceJournal(path, 3)
    assert journal.damage is not None
    assert f"analyzer journal {path}: damaged at offset {sizes[good - 1]} " in journal.damage
    assert ("cut-short" if damage == "truncated" else "checksum") in journal.damage
    assert f"{good} record(s)" in journal.damage
    (saved,), _ = journal.load()
    assert saved.fed_end_ns == frames[good - 1].end_ns  # the state after the last good save
    assert [seq for seq, _ in saved.stored] == list(range(good))
    assert len(saved.frames) == {4: 2, 5: 0}[damaged_save]  # fed after the good checkpoint
    live = _sited()
    for frame, _ in _received(frames[:good]):
        live.feed(frame)
    restored = _sited()
    assert saved.restore_into(restored)
    _assert_same(vars(live.assessor), vars(restored.assessor), "assessor")
    _assert_same(vars(live.pipeline), vars(restored.pipeline), "pipeline")
    assert path.stat().st_size == sizes[-1] - (sizes[-1] - sizes[good - 1] - 10
                                               if damage == "truncated" else 0)  # as found


def _journal_of_format(path: Path, number: int) -> bytes:
    """A journal of a few saves at ``path`` whose header says format ``number``; its bytes."""
    _saves(path, list(frames_from_samples(sine(1000.0, 0.1, 2.0, 16000), 16000, 100.0,
                                          device_id="j-1", start_ns=START_NS)))
    data = bytearray(path.read_bytes())
    data[len(HEADER) - 4:len(HEADER)] = struct.pack(">I", number)
    path.write_bytes(bytes(data))
    return bytes(data)


def test_a_journal_of_a_newer_format_is_refused_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "journal"
    data = _journal_of_format(path, 99)
    with pytest.raises(JournalError, match=rf"{path} is journal format 99; this analyzer "
                                           r"reads format 5 only \(written by a newer"):
        DeviceJournal(path)
    assert path.read_bytes() == data  # left as found


@pytest.mark.parametrize("number", [3, 4])
def test_a_journal_of_an_older_format_is_refused_as_older(tmp_path: Path, number: int) -> None:
    # Format 4 wrote the detection state's changes at every save, no frames (a held frame
    # packed, not its payload); format 3 packed each tuple and object as msgpack bytes of
    # their own: read as format 5, either would be misread, so it is refused whole.
    path = tmp_path / "journal"
    _journal_of_format(path, number)
    with pytest.raises(JournalError, match=rf"{path} is journal format {number}; this "
                                           r"analyzer reads format 5 only \(written by an "
                                           r"older Barkwatch\)"):
        DeviceJournal(path)


def test_values_come_back_with_their_types_tuples_deques_objects_and_arrays() -> None:
    encoder = StateEncoder()
    settings = DetectorSettings()  # frozen: encoded once, its bytes reused
    reorder = ReorderBuffer(7, 3.0)
    value = {
        "empty tuple": (), "nested": ((1, (2.0,)), [(3, "x")]), "list of lists": [[1], []],
        "deques": [deque([(1, 2)], 4), deque([])], "scalar": np.float32(1.5),
        "arrays": (np.arange(6, dtype=">i4").reshape(2, 3), np.zeros((0, 19)),
                   np.array(7, dtype=np.int64)),
        "objects": [settings, settings, reorder], "bytes": b"\x00", "none": None,
    }
    for _ in range(2):  # the second time from the encoder's caches
        back = unpack(encoder.pack(value))
        _assert_same(value, back, "value")
        assert back["deques"][0].maxlen == 4 and back["deques"][1].maxlen is None
        assert back["arrays"][0].dtype == np.dtype(">i4")


def test_a_rewritten_journal_holds_the_same_state_in_one_record_per_device(
    excerpt_20s: Path, tmp_path: Path,
) -> None:
    received = _received(_frames(excerpt_20s))[:13]
    analysis, reorder, path, journal = _sited_journal(tmp_path, 5)
    for frame, payload in received[:12]:
        _feed_and_save(journal, reorder, analysis, frame, payload)
    grown = path.stat().st_size
    journal.compact({"j-1": LiveDevice(reorder, 0, received[11][0].end_ns, analysis)})
    assert len(_record_sizes(path)) == 1 and path.stat().st_size < grown
    assert _kinds(path) == "C"  # the whole state: no frame is fed again
    _feed_and_save(journal, reorder, analysis, *received[12])  # saves go on after the rewrite
    journal.close()
    assert _kinds(path) == "CF"
    restored = _restored(path)
    _assert_same(vars(analysis.assessor), vars(restored.assessor), "assessor")
    _assert_same(vars(analysis.pipeline), vars(restored.pipeline), "pipeline")
    (saved,), _ = DeviceJournal(path).load()
    assert [seq for seq, _ in saved.stored] == list(range(13))


def test_a_journal_damaged_part_way_resumes_the_last_good_state_and_storage_goes_on(
    services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "journal.sqlite"
    config = _config(services, path)
    payloads = _payloads("j-cut", 5)
    publish_through_analyzer(config, frame_topic("j-cut"), payloads[:1], stored=1)
    publish_through_analyzer(config, frame_topic("j-cut"), payloads[1:3], stored=2)
    sizes = _record_sizes(path)
    assert len(sizes) >= 2
    os.truncate(path, path.stat().st_size - sizes[-1] // 2)  # its last save cut short
    damaged = path.read_bytes()
    caplog.set_level(logging.WARNING, logger="analyzer.ingest.keeper")
    restarted = publish_through_analyzer(config, frame_topic("j-cut"), payloads[3:], stored=2)
    assert restarted.failure is None
    assert restarted.counters.devices_resumed == 1 and restarted.counters.journal_set_aside == 1
    (aside,) = tmp_path.glob("journal.sqlite.damaged-*")
    assert aside.read_bytes() == damaged  # kept as found
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"{path}: damaged at offset" in m and str(aside) in m for m in errors), errors
    (saved,), problems = DeviceJournal(path).load()  # the new journal went on from there
    assert problems == [] and saved.device == "j-cut"
    keys = [seq for seq, _ in saved.stored]
    assert keys[0] == 0 and keys[-2:] == [3, 4]


def test_a_grown_journal_is_rewritten_by_the_running_analyzer_and_resumes_the_same(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(journal_module, "COMPACT_MIN_BYTES", 0)  # rewrite at every doubling
    path = tmp_path / "journal.sqlite"
    config = _config(services, path)
    payloads = _payloads("j-grow", 8)
    for payload in payloads[:6]:  # one save each: the file doubles, is rewritten
        publish_through_analyzer(config, frame_topic("j-grow"), [payload], stored=1)
    assert len(_record_sizes(path)) < 6
    restarted = publish_through_analyzer(config, frame_topic("j-grow"),
                                         [payloads[5], payloads[6]], stored=1)
    assert restarted.counters.devices_resumed == 1
    assert restarted.counters.duplicates == 1  # frame 5's key survived the rewrites
    assert restarted.counters.journal_errors == 0
    (saved,), _ = DeviceJournal(path).load()
    assert [seq for seq, _ in saved.stored] == list(range(7))


def _sited_config(services: Services, tmp_path: Path, journal: Path,
                  devices: tuple[str, ...]) -> AnalyzerConfig:
    """The analyzer's configuration with ``journal`` and an installation record for each of
    ``devices`` (the dog 8 m from the sensor, 12 m from the boundary)."""
    sites = tmp_path / "sites"
    sites.mkdir()
    for device in devices:
        (sites / f"{device}.toml").write_text(site_template(
            device, source_to_sensor_m=8.0, source_to_boundary_m=12.0))
    return dataclasses.replace(_config(services, journal), sites_dir=str(sites))


def test_a_restarted_analyzer_with_installation_records_stores_the_same_events_and_audibility(
    services: Services, excerpt_20s: Path, tmp_path: Path,
) -> None:
    # The assessor's journalled recent spectra and background decide each event's level at
    # 100 ft and audibility: a restart in the middle of an event must not change them.
    config = _sited_config(services, tmp_path, tmp_path / "journal.sqlite",
                           ("au-whole", "au-split"))
    client = InfluxClient(InfluxSettings(url=services.influx.url))

    def frames_of(device: str) -> list[bytes]:
        return [encode_frame(f) for f in _frames(excerpt_20s, device)]

    def events_of(device: str) -> list[tuple[object, ...]]:
        return [(e.onset_ns, e.offset_ns, e.label, e.plainly_audible, e.audibility_margin_db,
                 e.level_at_100ft_db, e.audibility_score)
                for e in load_events(client, device, START_NS, START_NS + 30 * NS)]

    whole = frames_of("au-whole")
    publish_through_analyzer(config, frame_topic("au-whole"), whole, stored=len(whole))
    expected = events_of("au-whole")
    longest = max(expected, key=lambda e: e[1] - e[0])  # type: ignore[operator]
    assert longest[3] is not None  # assessed
    cut = (longest[0] - START_NS) // NS + 1  # type: ignore[operator]
    split = frames_of("au-split")
    publish_through_analyzer(config, frame_topic("au-split"), split[:cut], stored=cut)
    restarted = publish_through_analyzer(config, frame_topic("au-split"), split[cut:],
                                         stored=len(split) - cut)
    assert restarted.counters.devices_resumed >= 1 and restarted.counters.journal_errors == 0
    assert events_of("au-split") == expected


def test_a_killed_analyzer_feeds_the_frames_since_the_checkpoint_again_and_stores_them_once(
    services: Services, excerpt_20s: Path, tmp_path: Path,
) -> None:
    path = tmp_path / "journal"
    config = _sited_config(services, tmp_path, path, ("k-whole", "k-split"))
    client = InfluxClient(InfluxSettings(url=services.influx.url))

    def frames_of(device: str) -> list[bytes]:
        return [encode_frame(f) for f in _frames(excerpt_20s, device)]

    def events_of(device: str) -> list[tuple[object, ...]]:
        return [(e.onset_ns, e.offset_ns, e.plainly_audible, e.audibility_margin_db)
                for e in load_events(client, device, START_NS, START_NS + 30 * NS)]

    whole = frames_of("k-whole")
    uninterrupted = publish_through_analyzer(config, frame_topic("k-whole"), whole,
                                             stored=len(whole))
    expected = events_of("k-whole")
    longest = max(expected, key=lambda e: e[1] - e[0])  # type: ignore[operator]
    cut = (longest[0] - START_NS) // NS + 1  # type: ignore[operator]
    assert cut > 3
    split = frames_of("k-split")
    runs = [publish_through_analyzer(config, frame_topic("k-split"), split[:2], stored=2),
            publish_through_analyzer(config, frame_topic("k-split"), split[2:cut],
                                     stored=cut - 2)]
    # Each stop checkpointed the device (a clean restart feeds nothing again); a kill leaves
    # the journal as its last save did: without that last record.
    assert _kinds(path, "k-split").endswith("FC")
    os.truncate(path, path.stat().st_size - _record_sizes(path)[-1] - 8)
    (saved,) = [s for s in DeviceJournal(path).load()[0] if s.device == "k-split"]
    assert len(saved.frames) == cut - 2  # fed after the checkpoint of the first stop
    runs.append(publish_through_analyzer(config, frame_topic("k-split"), split[cut:],
                                         stored=len(split) - cut))
    assert runs[-1].counters.journal_errors == 0
    assert events_of("k-split") == expected
    # The frames fed again stored nothing: the three runs stored each event once.
    assert sum(r.counters.events_stored for r in runs) == uninterrupted.counters.events_stored
    assert sum(r.counters.frames_stored for r in runs) == len(split)


def test_a_save_the_disk_refuses_is_cut_off_and_the_next_one_writes_the_state_whole(
    excerpt_20s: Path, tmp_path: Path,
) -> None:
    frames = _received(_frames(excerpt_20s)[:6])
    analysis, reorder, path, journal = _sited_journal(tmp_path)

    def save(frame: tuple[Frame, bytes]) -> None:
        _feed_and_save(journal, reorder, analysis, *frame)

    for frame in frames[:3]:
        save(frame)
    good = path.stat().st_size
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (good + 100, limit[1]))  # a full disk, nearly
    try:
        with pytest.raises(JournalError, match="saving failed"):
            save(frames[3])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.stat().st_size == good and journal.damage is None  # the partial record cut
    for frame in frames[4:]:
        save(frame)
    journal.close()
    restored = _restored(path)
    _assert_same(vars(analysis.assessor), vars(restored.assessor), "assessor")
    _assert_same(vars(analysis.pipeline), vars(restored.pipeline), "pipeline")
