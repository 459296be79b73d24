#!/usr/bin/env python3
"""Drives a real headless Chromium over the DevTools protocol on a pipe (no port, no
websocket library), for the tests that click through a page.

usage: cdp.py < STEPS.json

STEPS is a JSON list run in order in one tab; each step is one object:
  {"goto": URL}                      open URL and wait until the document has loaded
  {"wait": EXPR, "timeout": SECS}    poll the JavaScript EXPR until it is truthy (default 10 s)
  {"click": SELECTOR}                click the first element SELECTOR matches (it must exist)
  {"type": [SELECTOR, TEXT]}         set that input's value to TEXT
  {"eval": EXPR}                     the value of EXPR (a promise is awaited)
  {"screenshot": PATH}               write the viewport (1280x900) as a PNG to PATH
Prints one JSON line per step ({"ok": value} or {"error": text}) and stops at the first error
with exit 1. Chromium's own stderr goes to CDP_LOG (default /dev/null).
"""

import json
import os
import subprocess
import sys
import time
import base64


class Browser:
    def __init__(self):
        # DevTools reads commands on fd 3 and writes answers on fd 4, each NUL-terminated.
        to_chromium_r, self.to_chromium = os.pipe()
        self.from_chromium, from_chromium_w = os.pipe()

        def fds():
            # Out of the way first, so placing one pipe on 3 or 4 cannot close the other.
            r, w = os.dup(to_chromium_r), os.dup(from_chromium_w)
            while r < 5 or w < 5:
                r, w = (os.dup(r) if r < 5 else r), (os.dup(w) if w < 5 else w)
            os.dup2(r, 3)
            os.dup2(w, 4)

        log = open(os.environ.get("CDP_LOG", os.devnull), "w")
        self.proc = subprocess.Popen(
            [
                os.environ.get("CHROMIUM", "chromium"),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            preexec_fn=fds,
            close_fds=False,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        os.close(to_chromium_r)
        os.close(from_chromium_w)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def call(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_chromium, json.dumps(msg).encode() + b"\0")
        while True:
            answer = self.read()
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})

    def read(self):
        while b"\0" not in self.buf:
            chunk = os.read(self.from_chromium, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its pipe (see CDP_LOG)")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def open_tab(self):
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.call(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )

    def eval(self, expr):
        result = self.call(
            "Runtime.evaluate",
            {"expression": expr, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            raise RuntimeError(f"{expr}: {text}")
        return result.get("result", {}).get("value")

    def wait(self, expr, timeout):
        deadline = time.monotonic() + timeout
        while True:
            # JavaScript's truth, not Python's: an element comes back as {}.
            value = self.eval(f"!!({expr})")
            if value:
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"not true within {timeout}s: {expr}")
            time.sleep(0.1)

    def close(self):
        self.proc.kill()
        self.proc.wait()


def step(b, s):
    if "goto" in s:
        b.call("Page.navigate", {"url": s["goto"]})
        return b.wait("document.readyState === 'complete' && location.href !== 'about:blank'", 15)
    if "wait" in s:
        return b.wait(s["wait"], s.get("timeout", 10))
    if "click" in s:
        sel = json.dumps(s["click"])
        return b.eval(
            f"(() => {{ const e = document.querySelector({sel}); "
            f"if (!e) throw new Error('nothing matches ' + {sel}); e.click(); return true; }})()"
        )
    if "type" in s:
        sel, text = (json.dumps(v) for v in s["type"])
        return b.eval(
            f"(() => {{ const e = document.querySelector({sel}); "
            f"if (!e) throw new Error('nothing matches ' + {sel}); e.value = {text}; return true; }})()"
        )
    if "eval" in s:
        return b.eval(s["eval"])
    if "screenshot" in s:
        shot = b.call("Page.captureScreenshot", {"format": "png"})
        with open(s["screenshot"], "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        return s["screenshot"]
    raise RuntimeError(f"unknown step {s}")


def main():
    steps = json.load(sys.stdin)
    b = Browser()
    try:
        b.open_tab()
        for s in steps:
            try:
                value = step(b, s)
            except Exception as e:  # the step's failure is the test's answer
                print(json.dumps({"error": f"{json.dumps(s)}: {e}"}), flush=True)
                sys.exit(1)
            print(json.dumps({"ok": value}), flush=True)
    finally:
        b.close()


if __name__ == "__main__":
    main()
