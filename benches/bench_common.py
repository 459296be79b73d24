"""What the benches share: a fresh ledger to measure, a client of its `/resolve`, and a sample
as a Markdown row."""

import http.client, json, os, statistics, subprocess, tempfile, time


class Ledger:
    """A fresh `ledger serve` on a loopback port in its own temp HOME; the admin key its first
    start wrote is `key`. A context manager: the process is killed on leaving."""

    def __init__(self, bin_, prefix):
        self.home = tempfile.mkdtemp(prefix=prefix)
        self.env = {"PATH": os.environ["PATH"], "HOME": self.home, "RUST_LOG": "error"}
        self.data = os.path.join(self.home, "ledger")
        self.proc = subprocess.Popen(
            [bin_, "ledger", "serve", "--data", self.data, "--listen", "127.0.0.1:0"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = self.proc.stdout.readline().split()[-1]
            self.host, self.port = url.removeprefix("http://").split(":")
            with open(os.path.join(self.home, ".substrate", "config.json")) as f:
                self.key = json.load(f)["metabob"]["apiKey"]
        except BaseException:
            self.stop()
            raise

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()


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
