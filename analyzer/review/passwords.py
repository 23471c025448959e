"""Password hashing with argon2id (argon2-cffi, RFC 9106 parameters as the library sets them)."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from analyzer.errors import AnalyzerError

# argon2-cffi's defaults are RFC 9106's second recommended option (64 MiB, 3 passes).
_HASHER = PasswordHasher()
MIN_PASSWORD_CHARS = 10


class PasswordError(AnalyzerError):
    """A password that cannot be accepted (says why)."""


def hash_password(password: str) -> str:
    """The argon2id hash (PHC string) of ``password``; refuses short passwords."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise PasswordError(f"the password has {len(password)} characters; use at least "
                            f"{MIN_PASSWORD_CHARS}")
    return _HASHER.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """True when ``password`` matches; False for a mismatch or a malformed stored hash."""
    try:
        return _HASHER.verify(password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def burn_time(password: str) -> None:
    """Hash once and discard, so an unknown user name costs what a wrong password costs and
    response times do not tell which accounts exist."""
    _HASHER.hash(password or "-")
