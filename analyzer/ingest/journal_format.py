"""The analyzer journal's file format: a versioned header, then checksummed records of state.

The file (``journal_path``) is ``HEADER`` (``MAGIC`` and the format number, a 32-bit
big-endian integer), then records appended one after another, each

    payload length (4 bytes, big-endian) | CRC-32 of those 4 bytes and the payload | payload

and each payload a msgpack map (:mod:`analyzer.ingest.journal` says what the maps hold). A
record cut short (a crash or a full disk during the write) or whose checksum fails (a flipped
bit) is where reading stops: everything before it is the last good state
(:func:`read_records` names the offset).

Values inside the maps are encoded by :class:`StateEncoder`, not pickled: msgpack's own types,
plus extension types for numpy arrays and scalars (dtype string, shape, raw bytes in C
order); a tuple, a deque (its maxlen, then its items) and an object of this project's own
classes (``analyzer.*``, ``sensor.*``: its qualified class name, then its attribute map) are
msgpack arrays led by an extension value that says which, so one msgpack pass packs a
save's values and msgpack calls back into Python only for those and for arrays. Nothing but
those classes is ever built when a file is read, a dataclass whose fields have changed since
the file was written is refused by name (:class:`StateFormatError`), and the format number
says which layout of maps the file uses: a file of another format is refused with a
message, never misread.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgpack
import numpy as np

MAGIC = b"barkwatch analyzer journal\n"
# 5: the frames fed since a device's checkpoint journalled as their wire payloads, the state
# every ``checkpoint_frames``; 4: the state's changes at every save, values in one msgpack
# pass (markers lead tuples, deques and objects); 3: each tuple and object its own msgpack
# bytes (issue 37); 2 and 1 were SQLite files of pickles
FORMAT = 5
HEADER = MAGIC + struct.pack(">I", FORMAT)
_HEAD = struct.Struct(">II")  # payload length, CRC-32 of the length's bytes and the payload
# A record's payload is at most this long (a device's full state with 120 held frames is a few
# MB): a length beyond it is damage, not a record to read.
MAX_RECORD_BYTES = 256 * 1024 * 1024
SQLITE_MAGIC = b"SQLite format 3\x00"

_ARRAY, _SCALAR, _TUPLE, _DEQUE, _OBJECT, _ROWS, _PACKED = 1, 2, 3, 4, 5, 6, 7
_PACKAGES = ("analyzer.", "sensor.")  # the only classes a journal may name
ROWS_FROM = 8  # lists of this many tuples or more are encoded by column (:meth:`encode_rows`)
_MEMO_LIMIT = 1024
_MEMO_BYTES = 4096


class JournalFormatError(Exception):
    """The file is not a journal this analyzer can read: another file, or another format."""


class StateFormatError(Exception):
    """A value cannot be journalled, or a journalled one cannot be rebuilt by this code; the
    message names the type, class or attribute."""


def record(payload: bytes) -> bytes:
    """``payload`` framed as one record: length, checksum, payload."""
    length = struct.pack(">I", len(payload))
    return _HEAD.pack(len(payload), zlib.crc32(payload, zlib.crc32(length))) + payload


def check_header(head: bytes, where: str) -> None:
    """Refuse what does not begin with this format's header (``where`` names the file)."""
    if head.startswith(SQLITE_MAGIC):
        raise JournalFormatError(f"{where} is an SQLite file (the journal of format 2, before "
                                 f"issue 37, or another program's): not read")
    if not head.startswith(MAGIC) or len(head) < len(HEADER):
        raise JournalFormatError(f"{where} does not begin with the analyzer journal's header "
                                 f"({len(head)} byte(s) read): not a journal")
    found = struct.unpack(">I", head[len(MAGIC):len(HEADER)])[0]
    if found != FORMAT:
        newer = "a newer" if found > FORMAT else "an older"
        raise JournalFormatError(f"{where} is journal format {found}; this analyzer reads "
                                 f"format {FORMAT} only (written by {newer} Barkwatch): not read")


def read_records(file: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of each whole, intact record from the file's position on. At the
    first damaged one it raises :class:`DamagedRecord` (its offset and what is wrong); at the
    end of the file it stops."""
    while True:
        offset = file.tell()
        head = file.read(_HEAD.size)
        if not head:
            return
        if len(head) < _HEAD.size:
            raise DamagedRecord(offset, f"the file ends {len(head)} byte(s) into a record's "
                                        "header (a cut-short write)")
        length, crc = _HEAD.unpack(head)
        if length > MAX_RECORD_BYTES:
            raise DamagedRecord(offset, f"a record claims {length} bytes (at most "
                                        f"{MAX_RECORD_BYTES}): damaged")
        payload = file.read(length)
        if len(payload) < length:
            raise DamagedRecord(offset, f"the file ends {len(payload)} of {length} bytes into "
                                        "a record (a cut-short write)")
        if zlib.crc32(payload, zlib.crc32(head[:4])) != crc:
            raise DamagedRecord(offset, "a record's checksum does not match (damaged bytes)")
        yield offset, payload


class DamagedRecord(Exception):
    """A record at ``offset`` that cannot be read; ``why`` says how it is damaged."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(f"offset {offset}: {why}")
        self.offset = offset
        self.why = why


class StateEncoder:
    """Encodes state values to msgpack bytes (see the module docstring) in one pass: a
    tuple, deque or object is a msgpack array led by a marker (an extension value), so
    msgpack packs what it holds itself; only numpy values and small frozen dataclasses
    (settings, encoded once and their bytes reused while the same object is seen) are
    bytes of their own."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[object, msgpack.ExtType]] = {}
        # One packer per nesting depth (a memoized dataclass is packed on its own while
        # what holds it is being packed): made once, not per value.
        self._packers: list[msgpack.Packer] = []
        self._depth = 0
        self._heads: dict[tuple[np.dtype[Any], tuple[int, ...]], bytes] = {}
        self._classes: dict[type, tuple[msgpack.ExtType, tuple[str, ...] | None, bool]] = {}

    def pack(self, value: Any) -> bytes:
        """``value`` as msgpack bytes; :class:`StateFormatError` names what cannot be."""
        depth = self._depth
        if depth == len(self._packers):
            self._packers.append(msgpack.Packer(default=self._default, strict_types=True,
                                                use_bin_type=True))
        packer = self._packers[depth]
        self._depth = depth + 1
        try:
            return packer.pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            packer.reset()
            raise StateFormatError(f"cannot journal a value: {exc}") from exc
        except BaseException:
            packer.reset()
            raise
        finally:
            self._depth = depth

    def encode_rows(self, rows: list[Any]) -> Any:
        """A list of entries as it is packed: by column when they are ``ROWS_FROM`` or more
        tuples of one width (arrays of one dtype and shape stacked into one array, numpy
        scalars of one dtype into one), which is how a store of many spectra packs fast."""
        width = len(rows[0]) if rows and type(rows[0]) is tuple else -1
        if len(rows) < ROWS_FROM or width < 0 \
                or any(type(r) is not tuple or len(r) != width for r in rows):
            return rows
        columns: list[Any] = []
        for j in range(width):
            column = [r[j] for r in rows]
            first = column[0]
            if isinstance(first, np.ndarray) and all(
                    isinstance(c, np.ndarray) and c.dtype == first.dtype
                    and c.shape == first.shape for c in column):
                columns.append(["a", np.stack(column)])
            elif isinstance(first, np.generic) and all(type(c) is type(first) for c in column):
                columns.append(["a", np.array(column)])
            else:
                columns.append(["v", column])
        return [_ROWS_MARK, len(rows), columns]

    def _default(self, value: Any) -> Any:
        kind = type(value)
        if kind is tuple:
            return [_TUPLE_MARK, *value]
        if kind is np.ndarray or isinstance(value, np.generic):
            key = (value.dtype, value.shape)
            head = self._heads.get(key)
            if head is None:
                if value.dtype.hasobject:
                    raise StateFormatError("cannot journal a numpy array of Python objects")
                if len(self._heads) >= _MEMO_LIMIT:
                    self._heads.clear()
                head = self._heads[key] = _array_head(value)
            return _ext_of(_ARRAY if kind is np.ndarray else _SCALAR, head + value.tobytes())
        if kind is deque:
            return [_DEQUE_MARK, value.maxlen, *value]
        memo = self._memo.get(id(value))
        if memo is not None and memo[0] is value:
            return memo[1]
        known = self._classes.get(kind)
        if known is None:
            known = self._classes[kind] = _journalled_class(kind, value)
        name, fields, frozen = known
        # A dataclass by its fields (a cached_property's value in __dict__ is not state).
        attributes = vars(value) if fields is None else {f: getattr(value, f) for f in fields}
        if not frozen:
            return [name, attributes]
        packed = self.pack([name, attributes])
        if len(packed) > _MEMO_BYTES:  # settings are memoized, not frames (kept alive here)
            return _ext_of(_PACKED, packed)
        ext = _ext_of(_PACKED, packed)
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[id(value)] = (value, ext)  # holding it keeps its id from being reused
        return ext


def _ext_of(code: int, data: bytes) -> msgpack.ExtType:
    """``msgpack.ExtType(code, data)`` without its argument checks (ours are always an int
    and bytes): a third of the time of a save's ~20 extension values."""
    return tuple.__new__(msgpack.ExtType, (code, data))


# Markers that lead a msgpack array standing for a tuple, a deque (then its maxlen) or rows
# by column; an object's array is led by its class (an extension value holding the name).
_TUPLE_MARK, _DEQUE_MARK, _ROWS_MARK = (_ext_of(c, b"") for c in (_TUPLE, _DEQUE, _ROWS))


def _journalled_class(kind: type, value: object
                      ) -> tuple[msgpack.ExtType, tuple[str, ...] | None, bool]:
    """How objects of ``kind`` are journalled: the marker holding "module:qualname", a
    dataclass's field names (None: its ``__dict__``), whether it is a frozen dataclass."""
    name = f"{kind.__module__}:{kind.__qualname__}"
    if not kind.__module__.startswith(_PACKAGES) or not hasattr(value, "__dict__") \
            or hasattr(kind, "__slots__"):
        raise StateFormatError(f"cannot journal a {name} (only msgpack's types, numpy "
                               "arrays and scalars, tuples, deques and objects of "
                               "analyzer/sensor classes with a __dict__)")
    marker = _ext_of(_OBJECT, name.encode())
    if not dataclasses.is_dataclass(kind):
        return marker, None, False
    fields = tuple(f.name for f in dataclasses.fields(kind))
    return marker, fields, bool(kind.__dataclass_params__.frozen)  # type: ignore[attr-defined]


def _array_head(value: np.ndarray | np.generic) -> bytes:
    """What precedes an array's (or a scalar's) raw bytes (C order): the dtype string's
    length and the string, the number of dimensions and each, as 8 bytes, big-endian."""
    kind = value.dtype.str.encode()
    return struct.pack(f">B{len(kind)}sB{value.ndim}Q", len(kind), kind, value.ndim,
                       *value.shape)


def _array(data: bytes) -> np.ndarray:
    size = data[0]
    kind = np.dtype(data[1:1 + size].decode())
    ndim = data[1 + size]
    start = 2 + size + 8 * ndim
    shape = struct.unpack(f">{ndim}Q", data[2 + size:start])
    return np.frombuffer(data, dtype=kind, offset=start).reshape(shape).copy()


class _Class(str):
    """An object's class name, read from its marker (what leads the array of its state)."""


class _Marker:
    """What leads an array that stands for a tuple, a deque or rows by column."""

    def __init__(self, code: int) -> None:
        self.code = code


_MARKERS = {code: _Marker(code) for code in (_TUPLE, _DEQUE, _ROWS)}


def unpack(data: bytes) -> Any:
    """Values packed by :class:`StateEncoder`; :class:`StateFormatError` when this code
    cannot rebuild one (an unknown or changed class), ValueError for bytes that are not
    msgpack."""
    gc_was_on = gc.isenabled()
    gc.disable()  # msgpack makes no cycles; see analyzer/ingest/frame_check.py
    try:
        return msgpack.unpackb(data, ext_hook=_ext, list_hook=_led, strict_map_key=False,
                               raw=False)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ValueError(f"not msgpack: {exc}") from exc
    finally:
        if gc_was_on:
            gc.enable()


def _ext(code: int, data: bytes) -> Any:
    if code == _ARRAY:
        return _array(data)
    if code == _SCALAR:
        return _array(data)[()]
    if code == _OBJECT:
        return _Class(data.decode())
    if code == _PACKED:
        return unpack(data)
    marker = _MARKERS.get(code)
    if marker is None or data:
        raise StateFormatError(f"unknown extension type {code} in a saved value")
    return marker


def _led(items: list[Any]) -> Any:
    """An array as read: itself, or the tuple, deque, rows or object its first item (a
    marker or a class name) says it stands for."""
    if not items:
        return items
    lead = type(items[0])
    if lead is _Class:
        if len(items) != 2 or type(items[1]) is not dict:
            raise ValueError(f"saved {items[0]} is not a class and its attributes")
        return _rebuild(items[0], items[1])
    if lead is not _Marker:
        return items
    code = items[0].code
    if code == _TUPLE:
        return tuple(items[1:])
    if code == _DEQUE:
        return deque(items[2:], items[1])
    count, columns = items[1:]
    values = [list(c) if k == "a" else c for k, c in columns]
    if any(len(v) != count for v in values):
        raise ValueError("a column of saved rows has the wrong length")
    return list(zip(*values, strict=True)) if values else [() for _ in range(count)]


def _rebuild(name: str, attributes: dict[str, Any]) -> object:
    """An object of the project's class ``name`` ("module:qualname") with ``attributes``."""
    module_name, _, qualname = name.partition(":")
    if not module_name.startswith(_PACKAGES):
        raise StateFormatError(f"a saved value names class {name}, outside analyzer/sensor")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise StateFormatError(f"a saved value is of class {name}, which this version of "
                               f"Barkwatch does not have ({exc})") from exc
    if not isinstance(found, type):
        raise StateFormatError(f"a saved value names {name}, which is not a class")
    if dataclasses.is_dataclass(found):
        fields = {f.name for f in dataclasses.fields(found)}
        if set(attributes) != fields:
            raise StateFormatError(
                f"saved {name} has field(s) {sorted(attributes)}, this version's has "
                f"{sorted(fields)}")
    made: Any = object.__new__(found)
    made.__dict__.update(attributes)  # frozen dataclasses too: this bypasses __setattr__
    return made
