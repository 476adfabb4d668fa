"""A small headless-Chromium driver over the Chrome DevTools protocol (standard library only).

Used by the browser test and the HTML benchmark to open a report from disk, run script in it, click and take
screenshots. A test helper: no msprobe command uses it."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--mute-audio", "--remote-debugging-port=0")
_LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")
# the DevTools endpoint is on the loopback interface: never ask an http_proxy of the environment for it
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BrowserError(RuntimeError):
    """The browser could not be started or stopped answering."""


def find_chromium() -> str | None:
    explicit = os.environ.get("MSPROBE_CHROMIUM")
    if explicit:
        return explicit if os.path.isfile(explicit) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class _WebSocket:
    """Just enough of RFC 6455 for a client: masked text frames out, (fragmented) frames in, pings answered."""

    def __init__(self, url: str, timeout: float):
        match = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not match:
            raise BrowserError(f"unexpected DevTools address {url!r}")
        host, port, path = match.group(1), int(match.group(2)), match.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise BrowserError("DevTools closed the connection during the handshake")
            response += chunk
        head, self.buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise BrowserError(f"DevTools refused the websocket: {head[:200]!r}")

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(max(65536, count - len(self.buffer)))
            if not chunk:
                raise BrowserError("DevTools closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        length = len(payload)
        if length < 126:
            header += bytes([0x80 | length])
        elif length < 65536:
            header += bytes([0x80 | 126]) + struct.pack("!H", length)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", length)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if length < 4096 else _mask(payload, mask)
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode("utf-8"))

    def receive(self) -> str:
        parts = []
        while True:
            first, second = self._read(2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                length = struct.unpack("!H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if second & 0x80 else None
            payload = self._read(length)
            if mask:
                payload = _mask(payload, mask)
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise BrowserError("DevTools closed the websocket")
            if opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if first & 0x80:
                    return b"".join(parts).decode("utf-8")

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


def _mask(payload: bytes, mask: bytes) -> bytes:
    repeated = (mask * (len(payload) // 4 + 1))[:len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(len(payload), "big")


class Browser:
    """One headless Chromium with a fresh profile and one page; use as a context manager."""

    def __init__(self, executable: str | None = None, width: int = 1400, height: int = 1000, timeout: float = 20.0,
                 extra_args: tuple = ()):
        self.executable = executable or find_chromium()
        if not self.executable:
            raise BrowserError("no chromium executable found (apt-get install chromium)")
        self.width, self.height, self.timeout = width, height, timeout
        self.extra_args = tuple(extra_args)
        self.process = None
        self.profile = None
        self.ws = None
        self.next_id = 0
        self.stderr_lines: list = []

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="msprobe-chromium-")
        command = [self.executable, *FLAGS, *self.extra_args, f"--user-data-dir={self.profile}",
                   f"--window-size={self.width},{self.height}", "about:blank"]
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE, text=True, errors="replace")
        except OSError as exc:
            self.close()
            raise BrowserError(f"cannot start {self.executable}: {exc}") from None
        try:
            self._connect()
        except BaseException:
            # whatever went wrong after the start (an HTTP error from /json/list, a refused websocket, ^C): the
            # browser must not outlive this object
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
            self.close()
            raise

    def _connect(self) -> None:
        found: list = []
        ready = threading.Event()

        def drain():
            for line in self.process.stderr:
                self.stderr_lines.append(line.rstrip())
                match = _LISTENING.search(line)
                if match and not found:
                    found.append(match.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(self.timeout) or not found:
            tail = " | ".join(self.stderr_lines[-5:])
            self.close()
            raise BrowserError(f"chromium did not start: {tail or 'no output'}")
        port = int(re.match(r"ws://[^:]+:(\d+)/", found[0]).group(1))
        deadline = time.monotonic() + self.timeout
        page_url = None
        while page_url is None and time.monotonic() < deadline:
            with _DIRECT.open(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                targets = json.load(response)
            page_url = next((t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"), None)
            if page_url is None:
                time.sleep(0.05)
        if page_url is None:
            self.close()
            raise BrowserError("chromium opened no page")
        self.ws = _WebSocket(page_url, self.timeout)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def send(self, method: str, params: dict | None = None, timeout: float | None = None) -> dict:
        self.next_id += 1
        number = self.next_id
        self.ws.sock.settimeout(timeout or self.timeout)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params or {}}))
        while True:
            try:
                message = json.loads(self.ws.receive())
            except socket.timeout:
                raise BrowserError(f"no answer to {method} in time") from None
            if message.get("id") == number:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message')}")
                return message.get("result", {})

    def evaluate(self, expression: str, timeout: float | None = None):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"script error: {text}")
        return result.get("result", {}).get("value")

    def open(self, path: str) -> float:
        """Load a file; returns the seconds from the navigation request to the page's load event."""
        url = "file://" + os.path.abspath(path)
        started = time.perf_counter()
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")
        return time.perf_counter() - started

    def navigate(self, url: str, width: int | None = None, height: int | None = None) -> None:
        """Load any URL (http:// too); with width and height the page's viewport gets exactly that size (the window
        size of headless Chromium includes room for browser chrome). Returns once the request is sent: wait_for
        the state the page must reach."""
        if width and height:
            self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})

    def wait_for(self, expression: str, timeout: float | None = None, interval: float = 0.02):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            value = self.evaluate(f"(function(){{try{{return {expression};}}catch(e){{return null;}}}})()")
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression}")
            time.sleep(interval)

    def click(self, x: float, y: float) -> None:
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def screenshot(self, path: str, full_page: bool = False, quality: int | None = None) -> str:
        params: dict = {"format": "png"}
        if quality is not None:
            params = {"format": "jpeg", "quality": quality}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(data))
        return path

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.send("Browser.close", timeout=3)
            except (BrowserError, OSError):
                pass
            self.ws.close()
            self.ws = None
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
            self.process = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None
