"""Just enough of the Chrome DevTools protocol to watch a textual-serve page render.

Why not `chromium --dump-dom` / `--screenshot`: both fire at the page's load event, and
`--virtual-time-budget` does not wait for websocket traffic (measured: after a 15 s
budget the shot still showed textual-serve's intro card, taken 4 s after start). The
console arrives over a websocket after load, so the test has to poll the live page.

xterm.js draws with its canvas/WebGL renderer, so the terminal's text is not in the DOM.
A script injected before the page's own wraps `WebSocket` and keeps the bytes the
console sent in `window.__terminalText`, which is what the test reads.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium's own connections are refused by
# the sandbox's closed network, and it stalls on them.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
]

RECORD_TERMINAL = """
(() => {
  window.__terminalText = "";
  const decoder = new TextDecoder();
  const Native = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Native(...args);
    ws.addEventListener("message", (e) => {
      if (e.data instanceof ArrayBuffer) window.__terminalText += decoder.decode(e.data, {stream: true});
      else if (typeof e.data === "string") window.__terminalText += e.data;
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
})();
"""


def available() -> bool:
    return shutil.which(CHROMIUM) is not None


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        msg_id = next(self._ids)
        await self._ws.send_json({"id": msg_id, "method": method, "params": params})
        async for msg in self._ws:  # events arrive in between; only our answer counts
            data = json.loads(msg.data)
            if data.get("id") == msg_id:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return data["result"]
        raise RuntimeError("DevTools connection closed")

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not await self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout:.0f} s: {expression}")
            await asyncio.sleep(0.25)

    async def screenshot(self, path: Path) -> int:
        """Save a PNG of the page; return how many distinct colours it has.

        The colours are counted by the browser itself (no image library in the venv).
        """
        data = (await self.call("Page.captureScreenshot", format="png"))["data"]
        path.write_bytes(base64.b64decode(data))
        count = f"""new Promise((done) => {{
          const img = new Image();
          img.onload = () => {{
            const c = document.createElement("canvas");
            c.width = img.width; c.height = img.height;
            const ctx = c.getContext("2d");
            ctx.drawImage(img, 0, 0);
            const px = new Uint32Array(ctx.getImageData(0, 0, c.width, c.height).data.buffer);
            done(new Set(px).size);
          }};
          img.src = "data:image/png;base64,{data}";
        }})"""
        result = await self.call("Runtime.evaluate", expression=count, awaitPromise=True, returnByValue=True)
        return result["result"]["value"]


@asynccontextmanager
async def open_page(user_data_dir: Path, size: tuple[int, int] = (1280, 800)):
    """A fresh headless Chromium with one blank page, closed on exit."""
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={user_data_dir}", f"--window-size={size[0]},{size[1]}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port_file = user_data_dir / "DevToolsActivePort"  # Chromium writes it once it listens
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit code {proc.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with http.ws_connect(url, max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Page.addScriptToEvaluateOnNewDocument", source=RECORD_TERMINAL)
                yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
