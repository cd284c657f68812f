"""Short-lived signed tokens, so a browser never holds the API key.

A page's own backend (which holds the key) asks ``GET /v1/token`` for a token and hands it to the
page, which connects with ``?token=...``. A token is ``v1.<expiry>.<nonce>.<HMAC-SHA256>`` keyed
by the API key: the server keeps no state, every replica sharing the key accepts it, and
changing the key revokes them all. Pure functions (time is an argument).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "v1"
MAX_TTL_S = 3600
DEFAULT_TTL_S = 300


def _sign(key: str, body: str) -> str:
    digest = hmac.new(key.encode(), body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def mint(key: str, ttl_s: float, now: float) -> tuple[str, int]:
    """A token valid until ``now + ttl_s`` (seconds, at most :data:`MAX_TTL_S`), and that expiry."""
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"ttl_s must be in (0, {MAX_TTL_S}], got {ttl_s}")
    expires = int(now + ttl_s)
    body = f"{PREFIX}.{expires}.{secrets.token_urlsafe(9)}"
    return f"{body}.{_sign(key, body)}", expires


def verify(key: str, token: str, now: float) -> bool:
    """Whether ``token`` was minted with ``key`` and has not expired (constant-time comparison)."""
    body, _, sig = token.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit():
        return False
    return hmac.compare_digest(sig.encode(), _sign(key, body).encode()) and now < int(parts[1])
