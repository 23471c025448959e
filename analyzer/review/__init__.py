"""Evidence review in the browser for officers: sign-in, cases, findings, devices (I/O: HTTP)."""

from __future__ import annotations

from analyzer.review.passwords import hash_password, verify_password
from analyzer.review.ratelimit import LoginLimiter

__all__ = ["LoginLimiter", "hash_password", "verify_password"]
