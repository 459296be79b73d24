#!/usr/bin/env python3
"""A stand-in for the substrate's external producers (the gap store, activity-api, a memory
store): serves fixture answers over HTTP for `ledger serve --producer SHAPE=URL` to forward to.

usage: producer.py FIXTURES

FIXTURES is a JSON file mapping a shape to its answer: {"status": 200, "body": <JSON>,
"delay_ms": 0}. The file is read again on every request, so a test can change an answer while
the producer runs. A POST {"pointer": {...}} is answered with the fixture of pointer.type, or 404
{"error": "unknown shape"}; a fixture with "echo": true answers {"pointer": <what it received>}.
Every POST is counted per shape; GET /count answers {shape: n} and GET /last answers the last
pointer received, so a test can prove what was (and was not) sent. Prints `listening on PORT`
once it accepts, on an ephemeral loopback port.
"""

import http.server
import json
import sys
import threading
import time


def main():
    fixtures_path = sys.argv[1]
    counts = {}
    last = {"pointer": None}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            with lock:
                if self.path == "/count":
                    self.answer(200, dict(counts))
                elif self.path == "/last":
                    self.answer(200, {"pointer": last["pointer"]})
                else:
                    self.answer(404, {"error": "not found"})

        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            try:
                pointer = json.loads(self.rfile.read(length)).get("pointer") or {}
            except ValueError:
                return self.answer(400, {"error": "body is not JSON"})
            shape = pointer.get("type", "")
            with lock:
                counts[shape] = counts.get(shape, 0) + 1
                last["pointer"] = pointer
            with open(fixtures_path) as f:
                fixture = json.load(f).get(shape)
            if fixture is None:
                return self.answer(404, {"error": "unknown shape", "shape": shape})
            time.sleep(fixture.get("delay_ms", 0) / 1000)
            body = {"pointer": pointer} if fixture.get("echo") else fixture.get("body")
            try:
                self.answer(fixture.get("status", 200), body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the forwarder gave up first: that is the timeout under test

        def log_message(self, fmt, *args):
            sys.stderr.write("producer: " + (fmt % args) + "\n")

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
