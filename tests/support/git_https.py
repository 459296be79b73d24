#!/usr/bin/env python3
"""Serves the bare repositories under ROOT over https with the real `git http-backend` (git's
smart HTTP, as a CGI program), for the tests of clone and fetch over https.

usage: git_https.py ROOT CERT KEY [USER:PASSWORD]

Listens on an ephemeral port of GIT_HTTPS_BIND (default the loopback address) and prints
`listening on PORT` once it accepts; with CERT and KEY both `-` it serves plain http. With
USER:PASSWORD every request must carry that Basic login, else it is answered 401 with a
Basic challenge. A path under /moved/ is answered 301 to the same path without that prefix
(a renamed repository). Each request's method and path (never its headers) go to stderr.
"""

import base64
import http.server
import os
import ssl
import subprocess
import sys
from urllib.parse import urlsplit


def main():
    root, cert, key = sys.argv[1:4]
    login = sys.argv[4] if len(sys.argv) > 4 else None
    expected = "Basic " + base64.b64encode(login.encode()).decode() if login else None

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.backend()

        def do_POST(self):
            self.backend()

        def log_message(self, fmt, *args):
            sys.stderr.write("git_https: " + (fmt % args) + "\n")

        def backend(self):
            if expected and self.headers.get("Authorization") != expected:
                body = b"login required\n"
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            url = urlsplit(self.path)
            if url.path.startswith("/moved/"):
                self.send_response(301)
                self.send_header("Location", self.path[len("/moved"):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            length = int(self.headers.get("Content-Length") or 0)
            request_body = self.rfile.read(length) if length else b""
            env = {
                "PATH": os.environ.get("PATH", ""),
                "GIT_PROJECT_ROOT": root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "REQUEST_METHOD": self.command,
                "PATH_INFO": url.path,
                "QUERY_STRING": url.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(request_body)),
                "REMOTE_ADDR": self.client_address[0],
                "GATEWAY_INTERFACE": "CGI/1.1",
                "SERVER_PROTOCOL": self.request_version,
            }
            if login:
                env["REMOTE_USER"] = login.split(":", 1)[0]
            # Protocol v2 is asked for in this header; http-backend reads it from here.
            if self.headers.get("Git-Protocol"):
                env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            done = subprocess.run(
                ["git", "http-backend"],
                input=request_body,
                env=env,
                capture_output=True,
                check=False,
            )
            if done.stderr:
                sys.stderr.write("git_https: http-backend: " + done.stderr.decode(errors="replace"))
            head, _, body = done.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, body = done.stdout.partition(b"\n\n")
            status = 200
            headers = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    bind = os.environ.get("GIT_HTTPS_BIND", "127.0.0.1")
    server = http.server.ThreadingHTTPServer((bind, 0), Handler)
    if (cert, key) != ("-", "-"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
