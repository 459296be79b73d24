"""What the benches share: a client of a ledger's `/resolve`, and a sample as a Markdown row."""

import http.client, json, statistics, time


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def row(name, xs, places=2):
    """`| name | runs | median ms | p90 ms | min ms |` of `xs`, in seconds."""
    ms = [x * 1000 for x in xs]
    return (f"| {name} | {len(ms)} | {statistics.median(ms):.{places}f} | "
            f"{pct(ms, 0.9):.{places}f} | {min(ms):.{places}f} |")


class Client:
    """One keep-alive connection to the ledger with one key."""

    def __init__(self, host, port, key, timeout=120):
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.headers = {"authorization": f"ApiKey {key}", "content-type": "application/json"}

    def resolve(self, pointer):
        """(status, seconds, body)"""
        body = json.dumps({"pointer": pointer})
        t = time.perf_counter()
        self.conn.request("POST", "/resolve", body, self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        return resp.status, time.perf_counter() - t, data

    def ok(self, pointer):
        """(seconds, the JSON answer) of a pointer that must succeed."""
        status, dt, data = self.resolve(pointer)
        assert status < 300, (status, data[:300])
        return dt, json.loads(data)
