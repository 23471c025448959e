"""Evidence review in the browser for officers: sign-in, cases, findings, devices (I/O: HTTP)."""

from __future__ import annotations

from analyzer.review.app import create_app
from analyzer.review.passwords import PasswordError, hash_password, verify_password
from analyzer.review.ratelimit import LoginLimiter
from analyzer.review.server import serve, uvicorn_config
from analyzer.review.settings import (
    ReviewConfigError,
    ReviewSettings,
    describe_review_settings,
    load_review_settings,
)

__all__ = ["LoginLimiter", "PasswordError", "ReviewConfigError", "ReviewSettings",
           "create_app", "describe_review_settings", "hash_password", "load_review_settings",
           "serve", "uvicorn_config", "verify_password"]
