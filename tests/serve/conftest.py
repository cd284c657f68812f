"""Serving fixtures: a minimal Chrome DevTools Protocol driver for the browser tests (open a page in
headless Chromium, drive its controls, wait for the JSON it publishes in ``#result`` — the web
player's machine-readable outcome — and take screenshots)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from websockets.asyncio.client import connect


class JSError(RuntimeError):
    """A script evaluated in the page threw."""


class Page:
    """One tab of headless Chromium, driven over the DevTools protocol: evaluate scripts, wait for
    a condition, act on the DOM like a user, take screenshots. Console messages and uncaught
    exceptions are kept in ``console`` (shown when a wait times out)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.ids = iter(range(1, 1 << 30))
        self.console: list[str] = []

    async def call(self, method: str, **params) -> dict:
        mid = next(self.ids)
        await self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == mid:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self._event(reply)

    def _event(self, event: dict) -> None:
        p = event.get("params", {})
        if event.get("method") == "Runtime.consoleAPICalled":
            self.console.append(f"console.{p['type']}: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif event.get("method") == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.console.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")

    async def evaluate(self, expression: str, await_promise: bool = False):
        """The value of a JS expression (returned by value: JSON-able results only)."""
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise JSError(d.get("exception", {}).get("description") or d.get("text"))
        return r["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30.0, interval: float = 0.1):
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(interval)
        raise TimeoutError(f"{expression!r} not true within {timeout} s (last: {value!r}); console: {self.console}")

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'", timeout=15)

    async def result(self) -> dict:
        """The JSON the player publishes in ``#result`` ({} when there is none yet)."""
        value = await self.evaluate("(document.getElementById('result') || {}).textContent || ''")
        return json.loads(value) if value else {}

    async def wait_result(self, condition: str, timeout: float = 30.0) -> dict:
        """Wait until ``condition`` (JS, over ``r``: the parsed ``#result``) holds; returns the result."""
        await self.wait_for(f"(() => {{ const t = (document.getElementById('result') || {{}}).textContent; "
                            f"if (!t) return false; const r = JSON.parse(t); return !!({condition}); }})()", timeout)
        return await self.result()

    async def set_value(self, selector: str, value: str) -> None:
        """Set a form control's value as a user would: the value, then ``input`` and ``change`` events."""
        await self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            f"e.value = {json.dumps(value)}; e.dispatchEvent(new Event('input', {{bubbles: true}})); "
                            "e.dispatchEvent(new Event('change', {bubbles: true})); return e.value; })()")

    async def click(self, selector: str) -> None:
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    async def text(self, selector: str) -> str:
        return await self.evaluate(f"document.querySelector({json.dumps(selector)}).innerText")

    async def screenshot(self, path: Path, width: int = 1000) -> Path:
        """A PNG of the whole page, ``width`` CSS pixels wide (as tall as its content), written to ``path``."""
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=800, deviceScaleFactor=1, mobile=False)
        height = await self.evaluate("Math.ceil(document.documentElement.scrollHeight)")
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        await asyncio.sleep(0.2)  # a frame at the new size (the waveform redraws on resize)
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def _open_page(chromium: str, profile: Path):
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--autoplay-policy=no-user-gesture-required", "--hide-scrollbars", "--window-size=1000,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)  # its own process group: Debian's launcher is a script with children
    try:
        endpoint = None
        for line in proc.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
            if m := re.search(r"DevTools listening on ws://([^/]+)/", line):
                endpoint = m.group(1)
                break
        if endpoint is None:
            raise RuntimeError(f"{chromium} did not start its DevTools endpoint")
        pages = json.load(urllib.request.urlopen(f"http://{endpoint}/json/list", timeout=10))
        target = next(p for p in pages if p["type"] == "page")
        async with connect(target["webSocketDebuggerUrl"], max_size=None) as ws:
            page = Page(ws)
            await page.call("Runtime.enable")
            yield page
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def _page_result(chromium: str, url: str, profile: Path, timeout: float = 30.0) -> dict:
    async with _open_page(chromium, profile) as page:
        await page.call("Page.navigate", url=url)
        return await page.wait_result("r.drained || r.errors.length", timeout)


def find_chromium() -> str | None:
    return next((p for p in ("chromium-headless-shell", "chromium", "google-chrome") if shutil.which(p)), None)


@pytest.fixture(scope="session")
def page_result():
    """``await page_result(url, profile_dir, timeout=30)``: open ``url`` in headless Chromium and
    return the JSON the page publishes in ``#result`` once it reports drained or errors. Skips the
    test when no Chromium is installed."""
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no headless Chromium installed")

    async def run(url: str, profile: Path, timeout: float = 30.0) -> dict:
        return await _page_result(chromium, url, profile, timeout)

    return run


@pytest.fixture(scope="session")
def browser_page():
    """``async with browser_page(profile_dir) as page:`` a :class:`Page` (a fresh headless
    Chromium on about:blank) to navigate and drive; ``await page.screenshot(path)`` saves a PNG.
    Skips the test when no Chromium is installed."""
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no headless Chromium installed")
    return lambda profile: _open_page(chromium, profile)


@pytest.fixture(scope="session")
def parse_exposition():
    """Prometheus text back to ``{'name{labels}': value}``, read by prometheus-client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    def parse(text: str) -> dict[str, float]:
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                                  for k, v in sample.labels.items())
                out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
        return out

    return parse


@pytest.fixture(scope="session")
def timed_voice(tmp_path_factory):
    """A tiny random-weight voice with a duration predictor (coarse-first, phonemes, as the
    shipped one): it can change speed and time its words."""
    from voicespec.pipeline.tiny import build_tiny_voice
    from voicespec.api import Voice  # the pipeline's Voice, with the Python API's say/stream

    return Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "timed", layout="coarse"))
