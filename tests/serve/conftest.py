"""Serving fixtures: a minimal Chrome DevTools Protocol driver for the browser test (open a page in
headless Chromium and wait for the JSON it publishes in ``#result``, the web player's
machine-readable outcome)."""

from __future__ import annotations

import asyncio
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


async def _page_result(chromium: str, url: str, profile: Path, timeout: float = 30.0) -> dict:
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--autoplay-policy=no-user-gesture-required", "about:blank"],
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
        page = next(p for p in pages if p["type"] == "page")
        async with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            ids = iter(range(1, 1 << 30))

            async def call(method: str, **params) -> dict:
                mid = next(ids)
                await ws.send(json.dumps({"id": mid, "method": method, "params": params}))
                while True:
                    reply = json.loads(await ws.recv())
                    if reply.get("id") == mid:
                        return reply

            await call("Page.navigate", url=url)
            deadline = time.monotonic() + timeout
            value = None
            while time.monotonic() < deadline:
                reply = await call("Runtime.evaluate", returnByValue=True,
                                   expression="(document.getElementById('result') || {}).textContent || ''")
                value = reply["result"]["result"].get("value")
                if value:
                    result = json.loads(value)
                    if result.get("drained") or result.get("errors"):
                        return result
                await asyncio.sleep(0.2)
            raise TimeoutError(f"the page published no final result in {timeout} s (last: {value!r})")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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
