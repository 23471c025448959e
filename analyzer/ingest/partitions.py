"""Which devices this analyzer serves: the partitions of the fleet it owns.

Today one fixed share, ``partition = "K/N"`` (``analyzer.config.Partition``: a device is share
``crc32(device id) % N + 1``, docs/SCALE.md), and every analyzer receives every message and
acknowledges the ones it does not own. This is where the partitions an analyzer takes over
from a dead one will be added and dropped (issue 37, item 1), so the service asks only
:meth:`Ownership.owns` and counts what it does not own.
"""

from __future__ import annotations

from analyzer.config import Partition


class Ownership:
    """The devices this analyzer owns: those of its ``share`` of the fleet."""

    def __init__(self, share: Partition) -> None:
        self.share = share

    def owns(self, device_id: str) -> bool:
        """Whether ``device_id``'s frames, heartbeats and status are this analyzer's."""
        return self.share.owns(device_id)

    def __str__(self) -> str:
        return str(self.share)
