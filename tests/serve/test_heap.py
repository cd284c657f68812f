"""The server's malloc settings: set on glibc, left alone when the user chose their own."""

import ctypes
import sys

import pytest

from voicespec.serve.heap import USER_SETTINGS, give_back_freed_memory


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).gnu_get_libc_version
        return True
    except AttributeError:
        return False


@pytest.mark.skipif(not (sys.platform.startswith("linux") and _glibc()), reason="glibc only")
def test_thresholds_are_set_on_glibc(monkeypatch):
    for name in USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert give_back_freed_memory() is True


@pytest.mark.parametrize("name", USER_SETTINGS)
def test_a_users_own_malloc_settings_win(monkeypatch, name):
    monkeypatch.setenv(name, "131072")
    assert give_back_freed_memory() is False
