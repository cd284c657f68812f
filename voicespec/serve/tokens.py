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
import math
import re
import secrets

PREFIX = "v1"
MIN_TTL_S = 1  # expiries are whole seconds: below one, rounding would decide the token's life
MAX_TTL_S = 3600
DEFAULT_TTL_S = 300
TTL_TEXT = re.compile(r"[0-9]+(\.[0-9]+)?")  # ASCII only: float() also takes "1_000", "١٠", "inf", "1e3", " 5 "
EXPIRY_TEXT = re.compile(r"[0-9]+")  # str.isdigit() would pass "١٠" and "²" (int() rejects the latter)


def _sign(key: str, body: str) -> str:
    digest = hmac.new(key.encode(), body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def parse_ttl(text: str) -> int | float:
    """``ttl_s`` as a client writes it in a query string: a plain decimal number of seconds
    (``300``, ``2.5``) in [:data:`MIN_TTL_S`, :data:`MAX_TTL_S`]; anything else is a ValueError
    whose message says what is expected."""
    if not TTL_TEXT.fullmatch(text):
        raise ValueError(f"ttl_s must be a plain decimal number of seconds such as 300 or 2.5, got {text[:16]!r}")
    ttl = float(text) if "." in text else int(text)
    check_ttl(ttl)
    return ttl


def check_ttl(ttl_s: float) -> None:
    """A ValueError unless ``ttl_s`` is in [:data:`MIN_TTL_S`, :data:`MAX_TTL_S`] (NaN is not)."""
    if not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise ValueError(f"ttl_s must be from {MIN_TTL_S} to {MAX_TTL_S} seconds, got {ttl_s}")


def mint(key: str, ttl_s: float, now: float) -> tuple[str, int]:
    """A token valid for at least ``ttl_s`` seconds from ``now``, and its expiry: ``now + ttl_s``
    rounded *up* to a whole second (rounding down could hand out a token that has expired)."""
    check_ttl(ttl_s)
    expires = math.ceil(now + ttl_s)
    body = f"{PREFIX}.{expires}.{secrets.token_urlsafe(9)}"
    return f"{body}.{_sign(key, body)}", expires


def verify(key: str, token: str, now: float) -> bool:
    """Whether ``token`` was minted with ``key`` and has not expired (constant-time comparison)."""
    body, _, sig = token.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not EXPIRY_TEXT.fullmatch(parts[1]):
        return False
    return hmac.compare_digest(sig.encode(), _sign(key, body).encode()) and now < int(parts[1])
