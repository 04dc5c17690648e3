"""Headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe): stdlib only.

The browser reads commands (JSON, each ended by a NUL byte) on its fd 3 and writes replies and
events on its fd 4. `Browser.load` opens a page in a fresh tab at a given viewport and records
every request the page makes (Network.requestWillBeSent), so a test can assert that a report
fetches nothing (and what a Content-Security-Policy blocked: `Page.blocked`); `Page.evaluate`
runs JavaScript in it and `Page.screenshot` returns a PNG.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, exe: str, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="shapecalc-chromium-")
        to_r, to_w = os.pipe()  # we write commands → the browser's fd 3
        from_r, from_w = os.pipe()  # the browser's fd 4 → we read replies
        args = [exe, "--headless", "--remote-debugging-pipe", "--no-first-run",
                "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--mute-audio", "--hide-scrollbars",
                f"--user-data-dir={self.profile}", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run its sandbox as root

        def child_fds() -> None:  # the pipes become fds 3 and 4 (moved clear of them first)
            import fcntl

            a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        # close_fds=False: fds 3 and 4 are made in the child, after subprocess would close them;
        # the parent's own fds are close-on-exec (Python's default), so nothing else leaks
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False,
                                     preexec_fn=child_fds)
        os.close(to_r)
        os.close(from_w)
        self.w, self.r = to_w, from_r
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    # -- the protocol -------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)  # type: ignore[no-any-return]

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for i, e in enumerate(self.events):
            if e.get("method") == method and e.get("sessionId") == session:
                return self.events.pop(i)
        while True:
            e = self._read_message(deadline)
            if e.get("method") == method and e.get("sessionId") == session:
                return e
            self.events.append(e)

    # -- pages ----------------------------------------------------------------------------------
    def load(self, url: str, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        self.send("Page.enable", session=session)
        self.send("Network.enable", session=session)
        # what a Content-Security-Policy blocked never reaches the network: record it too
        self.send("Page.addScriptToEvaluateOnNewDocument", {"source": (
            "window.__blocked=[];document.addEventListener('securitypolicyviolation',"
            "function(e){window.__blocked.push(e.blockedURI)});")}, session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                         "deviceScaleFactor": 1,
                                                         "mobile": False}, session)
        self.send("Page.navigate", {"url": url}, session)
        self.wait_event("Page.loadEventFired", session)
        self.send("Runtime.evaluate", {"expression": "document.fonts.ready",
                                       "awaitPromise": True}, session)
        return Page(self, target, session)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.w)
        os.close(self.r)
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.b, self.target, self.session = browser, target, session

    def evaluate(self, expression: str) -> Any:
        r = self.b.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True}, self.session)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def blocked(self) -> list[str]:
        """What the page's Content-Security-Policy refused to fetch."""
        return list(self.evaluate(  # the violation events are queued tasks: let them run
            "new Promise(function(r){setTimeout(function(){r(window.__blocked)},50)})"))

    def requests(self) -> list[str]:
        """Every URL this page asked for, the page itself included (the events so far)."""
        self.evaluate("0")  # a round trip: events sent before it are read
        return [e["params"]["request"]["url"] for e in self.b.events
                if e.get("sessionId") == self.session
                and e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, full_page: bool = True) -> bytes:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            w, h = self.evaluate("[document.documentElement.scrollWidth,"
                                 "document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}
        data = self.b.send("Page.captureScreenshot", params, self.session)["data"]
        return base64.b64decode(data)

    def close(self) -> None:
        self.b.send("Target.closeTarget", {"targetId": self.target})
