"""A TLS-terminating reverse proxy for the tests, as an operator puts nginx or a cloud load
balancer in front of a plain ledger: HTTPS on an ephemeral loopback port, each request
forwarded over plain HTTP to UPSTREAM (host:port) and its answer relayed back.

Usage: tls_proxy.py CERT KEY UPSTREAM

Prints `listening on PORT` once it accepts.
"""

import http.client
import http.server
import ssl
import sys

CERT, KEY, UPSTREAM = sys.argv[1], sys.argv[2], sys.argv[3]
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}


class Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(UPSTREAM, timeout=30)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
        except OSError as e:
            self.send_error(502, f"upstream: {e}")
            return
        finally:
            upstream.close()
        self.send_response(answer.status, answer.reason)
        for k, v in answer.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = forward

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
