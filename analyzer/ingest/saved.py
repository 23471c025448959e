"""A device's analysis state as the journal (:mod:`analyzer.ingest.journal`) saves it, and
as a restarted analyzer gets it back.

Which state is saved is found, not listed (:func:`detection_parts`): the parts of the
pipeline's checkpoint, and every attribute of the audibility assessor and of the objects it
owns (the background tracker) except ``CONFIGURATION``, which the installation record and the
settings make. An attribute added to them is saved without a change here, and
:meth:`SavedDevice.restore_into` refuses a state whose parts are not the running code's
(tests/test_journal.py restores a stream at every frame and compares every attribute).
:class:`Replayed` builds a device's state from the journal's records: the latest checkpoint
of its detection state and the wire payloads of the frames fed after it, which
:meth:`SavedDevice.restore_into` feeds again (:func:`replay_frame`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from analyzer.ingest.device import DeviceAnalysis
from analyzer.ingest.journal_format import FORMAT, StateFormatError, unpack
from analyzer.ingest.ordering import ReorderBuffer
from sensor.errors import WireError
from sensor.wire import Frame, decode_frame

log = logging.getLogger(__name__)

# Keys of frames stored this recently (capture time) are kept, so that copies redelivered after
# a restart are known as duplicates: the broker redelivers what was not acknowledged, and the
# sensor re-sends the frames acknowledged in its last 60 s after a broker restart
# (sensor/publisher.py RESEND_WINDOW_S).
KEEP_STORED_S = 600
NS = 1_000_000_000
# Attributes of the assessor and its parts that are configuration, not state: made from the
# installation record and the audibility settings, which the context digest pins.
CONFIGURATION = frozenset({"site", "settings", "propagator", "vocal"})
PIPELINE, ASSESSOR = "pipeline.", "assessor."
VALUES = "="  # a record's entry for the values (every part that is not a store) together
Held = tuple[int, int]  # (seq, capture ns)


def detection_context(analysis: DeviceAnalysis) -> str:
    """What a saved detection state was made with: detector settings, dog head, audibility
    settings and installation record. A state is restored only into the same context."""
    pipeline, assessor = analysis.pipeline, analysis.assessor
    parts = (FORMAT, repr(pipeline.settings), pipeline.head.version,
             repr(assessor.settings) if assessor is not None else "",
             repr(assessor.site) if assessor is not None else "")
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def detection_parts(analysis: DeviceAnalysis) -> dict[str, Any]:
    """The detection state of ``analysis`` by path: ``pipeline.NAME`` for each part of the
    pipeline's checkpoint, ``assessor.NAME`` (``assessor.background.NAME``, ...) for each
    attribute of the assessor and the objects of this project it owns, but ``CONFIGURATION``.
    The values are the live objects (not copies)."""
    parts = {PIPELINE + k: v for k, v in analysis.pipeline.checkpoint().items()}
    if analysis.assessor is not None:
        _walk(analysis.assessor, ASSESSOR, parts)
    return parts


_OWNED: dict[type, bool] = {}  # by type: whether a value of it is an object the holder owns
_PATHS: dict[tuple[str, str], str] = {}  # (prefix, name) -> path: made once, not per save


def _walk(holder: object, prefix: str, parts: dict[str, Any]) -> None:
    for name, value in vars(holder).items():
        if name in CONFIGURATION:
            continue
        path = _PATHS.get((prefix, name))
        if path is None:
            path = _PATHS[(prefix, name)] = prefix + name
        if _is_owned(value):
            _walk(value, path + ".", parts)  # an object it owns: its state too
        else:
            parts[path] = value


_STORES = (deque, list)


def _is_owned(value: object) -> bool:
    kind = type(value)
    owned = _OWNED.get(kind)
    if owned is None:
        owned = _OWNED[kind] = (kind.__module__.startswith("analyzer.")
                                and hasattr(value, "__dict__")
                                and not dataclasses.is_dataclass(kind))
    return owned


class PartsLayout:
    """Where the detection parts of one analysis live, as :func:`detection_parts` finds them
    (the same walk), kept so that each save reads the parts without walking again.
    :meth:`read` checks first that the objects still have that shape (the same attributes,
    the same owned objects, stores still stores) and gives None when they do not."""

    def __init__(self, analysis: DeviceAnalysis) -> None:
        self.analysis = analysis
        self.assessor = analysis.assessor
        # Each walked holder's attributes: its __dict__ and the names it had.
        self._holders: list[tuple[dict[str, Any], frozenset[str]]] = []
        self._owned: list[tuple[dict[str, Any], str, object]] = []  # holder, name, object
        self._values: list[tuple[str, dict[str, Any], str]] = []  # path, holder, name
        self._stores: list[tuple[str, dict[str, Any], str]] = []
        if self.assessor is not None:
            self._walk(self.assessor, ASSESSOR)

    def _walk(self, holder: object, prefix: str) -> None:
        attributes = vars(holder)
        self._holders.append((attributes, frozenset(attributes)))
        for name, value in attributes.items():
            if name in CONFIGURATION:
                continue
            path = prefix + name
            if _is_owned(value):
                self._owned.append((attributes, name, value))
                self._walk(value, path + ".")
            elif is_store(path, value):
                self._stores.append((path, attributes, name))
            else:
                self._values.append((path, attributes, name))

    def read(self) -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, Any]]] | None:
        """The pipeline's checkpoint, the assessor's values by path and its stores (path,
        the live list or deque): :func:`detection_parts`, split; None when the objects'
        shape has changed since this layout was made (make a new one)."""
        if self.analysis.assessor is not self.assessor:
            return None
        for attributes, names in self._holders:
            if attributes.keys() != names:
                return None
        for attributes, name, owned in self._owned:
            if attributes[name] is not owned:
                return None
        values = {}
        for path, attributes, name in self._values:
            value = attributes[name]
            if type(value) in _STORES or _is_owned(value):
                return None
            values[path] = value
        stores = []
        for path, attributes, name in self._stores:
            value = attributes[name]
            if type(value) not in _STORES:
                return None
            stores.append((path, value))
        return self.analysis.pipeline.checkpoint(), values, stores


def is_store(path: str, value: object) -> bool:
    """Whether the part at ``path`` is a store: a list or deque of the assessor's, appended
    at its new end and dropped from its old end, its entries never changed in place (the
    pipeline's parts are small: written whole when they change)."""
    return type(value) in _STORES and path.startswith(ASSESSOR)


@dataclass
class SavedDevice:
    """One device's state as a restarted analyzer finds it."""

    device: str
    reorder: ReorderBuffer
    implausible: int
    fed_end_ns: int | None  # end of the last frame the pipeline took (None: none yet)
    context: str  # detection_context of the saved detection state ("" when none)
    pipeline: dict[str, Any] | None  # DevicePipeline.checkpoint(), None: no detection state
    assessor: dict[str, Any] | None  # path below the assessor -> value (stores as lists)
    stored: list[tuple[int, int]] = field(default_factory=list)  # (seq, capture ns)
    held: list[Frame] = field(default_factory=list)  # frames waiting for a predecessor
    payloads: dict[Held, bytes] = field(default_factory=dict)  # the held frames' wire bytes
    # Wire payloads of the frames the pipeline took after the checkpoint, in order: fed again
    # by restore_into (at most the journal's checkpoint_frames - 1)
    frames: list[bytes] = field(default_factory=list)
    refusal: str = ""  # why restore_into refused the state, for the log
    replayed: int = 0  # frames restore_into fed again

    @property
    def parts(self) -> dict[str, Any]:
        """The saved detection state by path, as :func:`detection_parts` gives it."""
        parts = {PIPELINE + k: v for k, v in (self.pipeline or {}).items()}
        parts.update({ASSESSOR + k: v for k, v in (self.assessor or {}).items()})
        return parts

    def restore_into(self, analysis: DeviceAnalysis) -> bool:
        """Put the saved detection state into ``analysis`` (freshly made and primed) if it was
        made in the same context and has exactly the parts this code keeps, then feed it the
        frames journalled after that checkpoint (:func:`replay_frame`: the detection only,
        nothing stored, published or acknowledged; ``replayed`` counts them); False (nothing
        changed, ``refusal`` says why) if not."""
        if self.pipeline is None:
            self.refusal = "no detection state was saved"
            return False
        try:  # all of them before anything changes: one that cannot be read refuses the state
            # (each was accepted once, under the analyzer's max_payload_bytes: not bounded again)
            frames = [decode_frame(payload, len(payload)) for payload in self.frames]
        except WireError as exc:
            self.refusal = (f"a frame journalled after its saved detection state cannot be "
                            f"decoded ({exc})")
            return False
        if self.context != detection_context(analysis):
            self.refusal = ("its saved detection state was made with other detector settings, "
                            "dog head or installation record")
            return False
        saved, wanted = self.parts, detection_parts(analysis)
        if saved.keys() != wanted.keys():
            self.refusal = (f"its saved detection state has part(s) "
                            f"{sorted(saved.keys() - wanted.keys())} this version does not "
                            f"keep and lacks {sorted(wanted.keys() - saved.keys())}")
            return False
        analysis.pipeline.restore({k[len(PIPELINE):]: v for k, v in saved.items()
                                   if k.startswith(PIPELINE)})
        for path, value in saved.items():
            if path.startswith(ASSESSOR):
                *owners, name = path[len(ASSESSOR):].split(".")
                holder: Any = analysis.assessor
                for owner in owners:
                    holder = getattr(holder, owner)
                current = getattr(holder, name)
                if is_store(path, current):  # kept as made (a deque's maxlen, say)
                    current.clear()
                    current.extend(value)
                else:
                    setattr(holder, name, value)
        for frame in frames:
            replay_frame(analysis, frame)
        self.replayed = len(frames)
        return True


def replay_frame(analysis: DeviceAnalysis, frame: Frame) -> None:
    """Feed ``frame`` again to the parts of ``analysis`` the journal saves: what
    :meth:`DeviceAnalysis.feed` does to them (the pipeline, then the assessor's observation
    with the frame's score; an event's assessment reads them only). Not the rules, which a
    restarted analyzer primes from InfluxDB, where this frame's events and coverage already
    are; its outputs go nowhere. A frame whose live feed raised raises at the same point here
    (the same code on the same input) and leaves the same partial state: passed over, as the
    live analyzer stored it unscored."""
    try:
        result = analysis.pipeline.feed(frame)
        if analysis.assessor is not None:
            analysis.assessor.observe(frame, result.max_dog_score)
    except Exception as exc:  # as live: the frame's state changes up to the failure stay
        log.warning("replaying frame %d of %s raised %s: %s (as when it was fed)", frame.seq,
                    analysis.device_id, type(exc).__name__, exc)


@dataclass
class LiveDevice:
    """What the journal saves of one device: the service's per-device state, by reference."""

    reorder: ReorderBuffer
    implausible: int
    fed_end_ns: int | None
    analysis: DeviceAnalysis | None
    pending: SavedDevice | None = None  # restored from the journal, not yet put into analysis
    # Wire payloads of the frames the pipeline took since the last save, in order
    fed: list[bytes] = field(default_factory=list)
    # Wire payloads of the frames waiting in ``reorder`` (one missing here is encoded again)
    payloads: dict[Held, bytes] = field(default_factory=dict)


def keep_recent(stored: deque[tuple[int, int]], keys: Iterable[tuple[int, int]]) -> None:
    """Add stored frames' keys; drop those more than ``KEEP_STORED_S`` older than the newest
    from the old end."""
    newest = stored[-1][1] if stored else None
    for key in keys:
        stored.append(key)
        newest = key[1] if newest is None else max(newest, key[1])
    if newest is not None:
        while stored and stored[0][1] < newest - KEEP_STORED_S * NS:
            stored.popleft()


@dataclass
class Replayed:
    """One device's state while the records are replayed (decoded as far as needed)."""

    device: str
    reorder: dict[str, Any] = field(default_factory=dict)
    implausible: int = 0
    fed_end_ns: int | None = None
    held: dict[Held, bytes] = field(default_factory=dict)
    stored: deque[tuple[int, int]] = field(default_factory=deque)
    context: str = ""
    parts: dict[str, Any] | None = None  # None: no detection state
    broken: str = ""  # why the detection state cannot be replayed (it is dropped)
    frames: list[bytes] = field(default_factory=list)  # fed after the checkpoint in ``parts``

    def apply(self, change: dict[str, Any]) -> None:
        self.reorder = change["r"]
        self.implausible, self.fed_end_ns = int(change["i"]), change["f"]
        if change.get("full"):
            self.held = {}
        for seq, capture_ns, data in change.get("hold", []):
            # Decoded when loaded: a frame this code cannot read loses only its score.
            self.held[(seq, capture_ns)] = data
        for seq, capture_ns in change.get("release", []):
            self.held.pop((seq, capture_ns), None)
        if "det" not in change:
            self.frames.extend(change.get("fed", ()))
            return
        # A checkpoint: the frames fed before it are in it; "fed" beside it came after it.
        self.frames = list(change.get("fed", ()))
        detection = change["det"]
        if detection is None:
            self.parts, self.context, self.broken = None, "", ""
            return
        if detection.get("full"):
            self.parts, self.context, self.broken = {}, detection["ctx"], ""
        if self.broken or self.parts is None:
            return
        try:
            # Decoded here, not with the record: a part this code cannot rebuild loses only
            # this device's detection state.
            for path, (kind, *data) in unpack(detection["p"]).items():
                if kind == "V":  # every part but the stores: the pipeline's, the assessor's
                    pipeline, assessor = data
                    self.parts.update({PIPELINE + k: v for k, v in pipeline.items()})
                    self.parts.update(assessor)
                elif kind == "s":
                    self.parts[path] = deque(data[0])
                elif kind == "d":
                    store = self.parts[path]
                    dropped, added = data
                    if dropped > len(store):
                        raise ValueError(f"{path} drops {dropped} of {len(store)} entries")
                    for _ in range(dropped):
                        store.popleft()
                    store.extend(added)
                else:
                    raise ValueError(f"unknown kind of part {kind!r}")
        except (StateFormatError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.parts, self.broken = None, f"{type(exc).__name__}: {exc}"

    def saved(self, problems: list[str]) -> SavedDevice:
        fresh = ReorderBuffer(int(self.reorder["window"]), float(self.reorder["max_wait_s"]))
        expected = {k for k in vars(fresh) if k != "_waiting"}
        if set(self.reorder) != expected:
            raise StateFormatError(f"its reorder buffer was saved with {sorted(self.reorder)}, "
                                   f"this version keeps {sorted(expected)}")
        vars(fresh).update(self.reorder)
        held, payloads = [], {}
        for key, data in sorted(self.held.items()):
            try:
                if not isinstance(data, bytes):
                    raise StateFormatError(f"a {type(data).__name__}, not a frame's payload")
                held.append(decode_frame(data, len(data)))
                payloads[key] = data
            except (StateFormatError, WireError) as exc:
                # That frame is not restored; it is stored already (unscored).
                log.error("analyzer journal: held frame %s of %s is unreadable (%s: %s)", key,
                          self.device, type(exc).__name__, exc)
        if self.broken:
            problems.append(f"{self.device}: its detection state cannot be read "
                            f"({self.broken}); detection starts afresh")
        pipeline = assessor = None
        if self.parts is not None and not self.broken:
            pipeline = {k[len(PIPELINE):]: v for k, v in self.parts.items()
                        if k.startswith(PIPELINE)}
            assessor = {k[len(ASSESSOR):]: (list(v) if type(v) is deque else v)
                        for k, v in self.parts.items() if k.startswith(ASSESSOR)}
        return SavedDevice(self.device, fresh, self.implausible, self.fed_end_ns,
                           self.context if pipeline is not None else "", pipeline, assessor,
                           list(self.stored), held, payloads,
                           list(self.frames) if pipeline is not None else [])
