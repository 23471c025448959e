"""Audio sources: a microphone through sounddevice (PortAudio), or a sound file for replay.

Both yield :class:`AudioBlock` items: mono float64 samples in [-1, 1], or a count of samples
that were lost (a capture block dropped because the consumer fell behind). The stream
callback only copies the block onto a bounded queue and returns; overflows and drops are
counted in :class:`CaptureCounters` and reported in the heartbeat.

With a microphone array (issue 36) a block also carries every input channel
(``AudioBlock.channels``, frames x channels, float32): the mono samples are the measurement
channel's, as with one microphone, and the frame builder keeps the channels a few seconds
for the bearing of dog seconds (:mod:`sensor.bearing`).
"""

from __future__ import annotations

import itertools
import logging
import queue
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sensor.errors import AudioInputError
from sensor.wire import SUPPORTED_SAMPLE_RATES

log = logging.getLogger(__name__)


@dataclass
class AudioBlock:
    """Either samples (mono, float64) or ``lost_samples`` > 0 for a gap in the capture.
    ``channels``: with an array, the same samples on every input channel, (frames, channels)
    float32; None otherwise."""

    samples: np.ndarray | None = None
    lost_samples: int = 0
    channels: np.ndarray | None = None


class AudioSampleError(AudioInputError):
    """A file's audio cannot be used from ``sample_index`` on (counted in the file's own
    samples, from 0): a sample that is not a finite number, or data that will not decode."""

    def __init__(self, message: str, sample_index: int) -> None:
        super().__init__(message)
        self.sample_index = sample_index


@dataclass
class CaptureCounters:
    """Counters written by the capture side; plain ints, read by the heartbeat."""

    blocks: int = 0
    overflows: int = 0
    dropped_blocks: int = 0
    dropped_samples: int = 0


def supported_rate_for(file_rate: int) -> int:
    """The capture rate a file is analysed at: its own when supported, else the nearest below
    (16 kHz for anything lower, so the mel features up to 8 kHz keep their meaning)."""
    if file_rate in SUPPORTED_SAMPLE_RATES:
        return file_rate
    lower = [r for r in SUPPORTED_SAMPLE_RATES if r <= file_rate]
    return max(lower) if lower else min(SUPPORTED_SAMPLE_RATES)


def decode_with_ffmpeg(path: Path, out: Path) -> None:
    """Decode the first audio stream of ``path`` (AAC in .m4a, a phone's video …), every
    channel, at its own rate, to 32-bit float RF64 ``out``, a packet at a time.

    For the formats libsndfile cannot read. Uses FFmpeg's decoders through PyAV, an
    optional dependency (part of ``barkwatch[analyzer]``); raise AudioInputError naming what
    is missing or what went wrong.
    """
    try:
        import av
    except ImportError as exc:
        raise AudioInputError(
            "compressed formats such as AAC (.m4a) are read through PyAV, which is not "
            "installed (pip install av, or install barkwatch[analyzer])"
        ) from exc
    import soundfile

    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise AudioInputError("it holds no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout=stream.layout, rate=stream.rate)
            channels = stream.layout.nb_channels
            with soundfile.SoundFile(
                str(out), "w", samplerate=stream.rate, channels=channels, format="RF64",
                subtype="FLOAT",
            ) as handle:  # fmt: skip
                # None at the end flushes the samples the resampler still holds.
                for frame in itertools.chain(container.decode(stream), [None]):
                    for packed in resampler.resample(frame):
                        handle.write(packed.to_ndarray().reshape(-1, channels))
    except av.FFmpegError as exc:
        raise AudioInputError(exc.strerror or str(exc)) from exc
    except (OSError, RuntimeError, soundfile.LibsndfileError) as exc:
        raise AudioInputError(f"the decoded copy {out} could not be written: {exc}") from exc


def declared_frames(path: Path) -> int | None:
    """The sample frames a WAV (RIFF or RF64) or AIFF header declares, or None: another
    format, or a size left open (0 or 0xFFFFFFFF, as a recorder writes before it finishes).

    libsndfile quietly reads what follows, so this is how a truncated file is noticed.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
            if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
                return _riff_declared_frames(handle, rf64=head[:4] == b"RF64")
            if head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
                return _aiff_declared_frames(handle)
    except OSError:
        return None
    return None


def _chunks(handle: Any, endian: str) -> Iterator[tuple[bytes, int]]:
    """(id, size) of each chunk from the handle's position; the handle is left at its data."""
    for _ in range(1000):  # a bound: a crafted file cannot make this loop long
        header = handle.read(8)
        if len(header) < 8:
            return
        chunk_id, size = header[:4], struct.unpack(endian + "I", header[4:])[0]
        start = handle.tell()
        yield chunk_id, size
        handle.seek(start + size + (size & 1))  # chunks are padded to an even size


def _riff_declared_frames(handle: Any, rf64: bool) -> int | None:
    block_align = 0
    ds64_data = 0
    for chunk_id, size in _chunks(handle, "<"):
        body = handle.read(min(size, 64))
        if chunk_id == b"ds64" and len(body) >= 16:
            ds64_data = struct.unpack("<Q", body[8:16])[0]
        elif chunk_id == b"fmt " and len(body) >= 14:
            block_align = struct.unpack("<H", body[12:14])[0]
        elif chunk_id == b"data":
            data = ds64_data if rf64 and size == 0xFFFFFFFF else size
            if block_align == 0 or data in (0, 0xFFFFFFFF):
                return None
            return int(data // block_align)
    return None


def _aiff_declared_frames(handle: Any) -> int | None:
    for chunk_id, size in _chunks(handle, ">"):
        if chunk_id == b"COMM":
            body = handle.read(min(size, 18))
            return int(struct.unpack(">I", body[2:6])[0]) if len(body) >= 6 else None
    return None


class FileSource:
    """Reads a sound file in blocks, mixed to mono, as fast as possible or paced.

    ``speed`` paces delivery: 1.0 is real time, 10.0 ten times faster, None unpaced.

    Files at an unsupported rate are resampled (soxr, streaming) to :func:`supported_rate_for`.
    Files libsndfile cannot read (AAC in .m4a …) are first decoded by FFmpeg into a temporary
    file (:func:`decode_with_ffmpeg`).

    A sample that is not a finite number (NaN, infinity: float files can hold them) or data
    that stops decoding raises :class:`AudioSampleError` with the sample's index; the blocks
    before it have been delivered. ``warnings`` lists what was noticed but read anyway (a
    truncated file), each also logged.

    ``keep_channels`` (a recording of a microphone array): each block also carries every
    channel of the file (``AudioBlock.channels``); the file must be at a supported rate,
    since the channels are not resampled.
    """

    def __init__(
        self,
        path: str | Path,
        block_s: float = 1.0,
        speed: float | None = None,
        channel: int | None = None,
        max_s: float | None = None,
        keep_channels: bool = False,
    ) -> None:
        import soundfile

        if speed is not None and not 0 < speed <= 1000:
            raise AudioInputError(
                f"replay speed {speed} must be between 0 and 1000 (1 = real time)"
            )
        self.path = Path(path)
        self.speed = speed
        self.channel = channel
        if not self.path.exists():
            raise AudioInputError(f"audio file {self.path} does not exist")
        if not self.path.is_file():
            raise AudioInputError(f"audio file {self.path} is not a regular file")
        self._read_path = self.path
        try:
            info = soundfile.info(str(self.path))
        except FileNotFoundError as exc:
            raise AudioInputError(f"audio file {self.path} does not exist") from exc
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            info = self._decode_to_scratch(exc)
        if info.frames <= 0 or info.samplerate <= 0:
            raise AudioInputError(f"audio file {self.path} holds no audio")
        if channel is not None and channel >= info.channels:
            raise AudioInputError(
                f"audio file {self.path} has {info.channels} channel(s); channel {channel} asked"
            )
        self.file_rate = int(info.samplerate)
        self.sample_rate = supported_rate_for(self.file_rate)
        self.file_channels = int(info.channels)
        self.keep_channels = keep_channels
        if keep_channels and self.sample_rate != self.file_rate:
            raise AudioInputError(
                f"audio file {self.path} is at {self.file_rate} Hz: an array's recording is "
                f"read at its own rate, one of {', '.join(map(str, SUPPORTED_SAMPLE_RATES))} Hz"
            )
        self.file_frames = int(info.frames)
        if max_s is not None:
            self.file_frames = min(self.file_frames, max(1, round(max_s * info.samplerate)))
        self.duration_s = self.file_frames / info.samplerate
        self.block_frames = max(1, round(block_s * self.file_rate))
        self.counters = CaptureCounters()
        self.warnings: list[str] = []
        if channel is None and info.channels > 1:
            self._warn(
                f"audio file {self.path} has {info.channels} channels: their average is "
                "measured, as one microphone would hear them"
            )
        declared = declared_frames(self._read_path) if self._read_path == self.path else None
        if declared is not None and declared > info.frames:
            self._warn(
                f"audio file {self.path} is truncated: its header says "
                f"{declared / info.samplerate:.3f} s ({declared} samples), only "
                f"{info.frames / info.samplerate:.3f} s ({info.frames} samples) follow; "
                "reading what is there"
            )

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings.append(message)

    def _refuse_non_finite(self, data: np.ndarray, first_index: int) -> None:
        """Raise AudioSampleError at the first sample (of the channels used) that is NaN or
        infinite: it would turn every level and score it touches into NaN."""
        used = data if self.channel is None else data[:, [self.channel]]
        finite = np.isfinite(used)
        if finite.all():
            return
        row, column = (int(i[0]) for i in np.nonzero(~finite))
        index = first_index + row
        where = f"{index / self.file_rate:.3f} s"
        if data.shape[1] > 1:
            where += f", channel {column if self.channel is None else self.channel}"
        raise AudioSampleError(
            f"audio file {self.path}: sample {index} ({where}) is {used[row, column]}, "
            "not a finite number",
            index,
        )

    def _decode_to_scratch(self, refused: Exception) -> Any:
        """The file is no format libsndfile reads: decode it with FFmpeg into a temporary
        file (removed with this source) and return that file's info."""
        import soundfile

        scratch = tempfile.TemporaryDirectory(prefix="barkwatch-decoded-")
        weakref.finalize(self, scratch.cleanup)
        decoded = Path(scratch.name) / "decoded.rf64"
        try:
            decode_with_ffmpeg(self.path, decoded)
        except AudioInputError as exc:
            raise AudioInputError(
                f"audio file {self.path} is not audio that can be decoded: "
                f"{_libsndfile_reason(refused)}; FFmpeg: {exc}"
            ) from exc
        log.info("decoded %s with FFmpeg (PyAV)", self.path)
        self._read_path = decoded
        return soundfile.info(str(decoded))

    def __iter__(self) -> Iterator[AudioBlock]:
        import soundfile

        resampler: Any = None
        if self.sample_rate != self.file_rate:
            import soxr

            log.info(
                "resampling %s from %d Hz to %d Hz", self.path, self.file_rate, self.sample_rate
            )
            resampler = soxr.ResampleStream(self.file_rate, self.sample_rate, 1, dtype="float64")
        started = time.monotonic()
        delivered = 0
        try:
            with soundfile.SoundFile(str(self._read_path)) as handle:
                while True:
                    want = min(self.block_frames, self.file_frames - delivered)
                    try:
                        data = handle.read(want, dtype="float64", always_2d=True)
                    except (RuntimeError, soundfile.LibsndfileError) as exc:
                        raise AudioSampleError(
                            f"audio file {self.path} cannot be decoded after sample {delivered}"
                            f" ({delivered / self.file_rate:.3f} s): {exc}",
                            delivered,
                        ) from exc
                    self._refuse_non_finite(data, delivered)
                    last = data.shape[0] < self.block_frames or delivered + want >= self.file_frames
                    mono = data[:, self.channel] if self.channel is not None else data.mean(axis=1)
                    if resampler is not None:
                        mono = resampler.resample_chunk(mono, last=last)
                    if mono.size:
                        self.counters.blocks += 1
                        yield AudioBlock(samples=mono, channels=data.astype(np.float32)
                                         if self.keep_channels else None)
                    delivered += data.shape[0]
                    if self.speed is not None:
                        due_s = delivered / self.file_rate / self.speed
                        ahead = due_s - (time.monotonic() - started)
                        if ahead > 0:
                            time.sleep(ahead)
                    if last:
                        break
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            raise AudioInputError(f"audio file {self.path} cannot be decoded: {exc}") from exc


def _libsndfile_reason(refused: Exception) -> str:
    """libsndfile's refusal in words that fit a file known to exist: for a format it does not
    know (MP3 before 1.1, AAC, garbage) it says "File does not exist or is not a regular file
    (possibly a pipe?)", which misleads when the file is right there."""
    text = str(refused)
    if "does not exist" in text or "not a regular file" in text:
        return "libsndfile does not recognise its format"
    return f"libsndfile: {text}"


def _sounddevice() -> Any:
    try:
        import sounddevice
    except OSError as exc:
        raise AudioInputError(
            f"PortAudio is not available ({exc}); install it with 'apt-get install libportaudio2'"
        ) from exc
    return sounddevice


def list_input_devices() -> list[tuple[int, str, int, float]]:
    """(index, name, input channels, default rate) of every device that can capture."""
    sd = _sounddevice()
    devices = []
    for index, device in enumerate(sd.query_devices()):
        if device["max_input_channels"] > 0:
            devices.append(
                (index, device["name"], device["max_input_channels"], device["default_samplerate"])
            )
    return devices


def describe_input_devices() -> str:
    """A readable list of capture devices, for ``--list-devices`` and error messages."""
    devices = list_input_devices()
    if not devices:
        return "  (no audio input devices found)"
    return "\n".join(
        f"  [{index}] {name} ({channels} ch, default {rate:.0f} Hz)"
        for index, name, channels, rate in devices
    )


def resolve_input_device(spec: str) -> int | None:
    """Turn a device name (substring, case-insensitive) or index into a PortAudio index.

    An empty spec means the system default (None). Unknown or ambiguous names raise an error
    that lists the available input devices; no input device at all raises one that says so
    (PortAudio's own words for it are ``Error querying device -1``).
    """
    devices = list_input_devices()
    if not devices:
        raise AudioInputError(
            "no audio capture device exists: PortAudio finds no input at all (is the "
            "microphone plugged in, and may this user use it, e.g. in group 'audio'?); "
            "'barkwatch-sensor --list-devices' shows what it finds. Without a microphone, "
            "calibrate and run read a sound file with --input FILE"
        )
    if spec == "":
        return None
    if spec.isdigit():
        index = int(spec)
        if any(d[0] == index for d in devices):
            return index
        raise AudioInputError(
            f"audio input device {index} does not exist or cannot capture; available:\n"
            + describe_input_devices()
        )
    matches = [d for d in devices if spec.lower() in d[1].lower()]
    exact = [d for d in matches if d[1].lower() == spec.lower()]
    if len(exact) == 1 or len(matches) == 1:
        return (exact or matches)[0][0]
    reason = "matches several devices" if matches else "matches no input device"
    raise AudioInputError(
        f"audio input device {spec!r} {reason}; available:\n" + describe_input_devices()
    )


class MicrophoneSource:
    """Captures mono float32 audio from a PortAudio input device.

    The callback copies the block onto a bounded queue and returns; when the queue is full
    the block is dropped and counted, and the consumer is told how many samples were lost so
    that capture time stays exact. ``max_samples`` stops after that many samples (used to
    capture a known length from a virtual input). ``input_channels`` (a microphone array):
    open that many channels and hand every one on with the block (``AudioBlock.channels``);
    the mono samples are still ``channel``'s.
    """

    def __init__(
        self,
        device: str,
        sample_rate: int,
        block_s: float = 0.1,
        queue_blocks: int = 600,
        channel: int = 0,
        max_samples: int | None = None,
        input_channels: int | None = None,
    ) -> None:
        self._sd = _sounddevice()
        self.device = resolve_input_device(device)
        self.sample_rate = sample_rate
        self.channel = channel
        if input_channels is not None and input_channels <= channel:
            raise AudioInputError(f"{input_channels} input channels do not include the "
                                  f"measurement channel {channel}")
        self.input_channels = input_channels
        self._opened = input_channels or channel + 1
        self.block_frames = max(1, round(block_s * sample_rate))
        self.max_samples = max_samples
        self.counters = CaptureCounters()
        self.start_ns = 0
        # Each entry carries the samples dropped before it, so a gap lands at the right time.
        self._queue: queue.Queue[tuple[np.ndarray, int]] = queue.Queue(maxsize=queue_blocks)
        self._stop = threading.Event()
        try:
            self._sd.check_input_settings(
                device=self.device, channels=self._opened, samplerate=sample_rate,
                dtype="float32"
            )
        except Exception as exc:  # PortAudio reports through several exception types
            raise AudioInputError(
                f"audio input device {device or 'default'!r} cannot capture channel "
                f"{self._opened - 1 if input_channels else channel} at {sample_rate} Hz: {exc}"
            ) from exc

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        # Runs on PortAudio's thread: copy and hand on, count problems, nothing else.
        if status.input_overflow:
            self.counters.overflows += 1
        try:
            block = indata.copy() if self.input_channels else indata[:, self.channel].copy()
            self._queue.put_nowait((block, self.counters.dropped_samples))
        except queue.Full:
            self.counters.dropped_blocks += 1
            self.counters.dropped_samples += frames

    def stop(self) -> None:
        """Ask the iteration to end after the current block."""
        self._stop.set()

    def queue_depth(self) -> int:
        """Blocks waiting between the callback and the consumer."""
        return self._queue.qsize()

    def __iter__(self) -> Iterator[AudioBlock]:
        stream = self._sd.InputStream(
            device=self.device,
            channels=self._opened,
            samplerate=self.sample_rate,
            blocksize=self.block_frames,
            dtype="float32",
            callback=self._callback,
        )
        delivered = 0
        lost_reported = 0
        with stream:
            self.start_ns = time.time_ns()
            while not self._stop.is_set():
                if self.max_samples is not None and delivered >= self.max_samples:
                    break
                try:
                    block, lost = self._queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                if lost > lost_reported:
                    yield AudioBlock(lost_samples=lost - lost_reported)
                    delivered += lost - lost_reported
                    lost_reported = lost
                if self.max_samples is not None:
                    block = block[: self.max_samples - delivered]
                delivered += block.shape[0]
                self.counters.blocks += 1
                if self.input_channels:
                    yield AudioBlock(samples=block[:, self.channel].astype(np.float64),
                                     channels=block)
                else:
                    yield AudioBlock(samples=block.astype(np.float64))
