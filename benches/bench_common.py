"""What the benches share: a fresh ledger to measure, a client of its `/resolve`, and a sample
as a Markdown row."""

import http.client, json, os, random, statistics, subprocess, tempfile, time


class Ledger:
    """A fresh `ledger serve` on a loopback port in its own temp HOME; the admin key its first
    start wrote is `key`. A context manager: the process is killed on leaving."""

    def __init__(self, bin_, prefix, extra=(), env=None):
        self.home = tempfile.mkdtemp(prefix=prefix)
        self.env = {"PATH": os.environ["PATH"], "HOME": self.home, "RUST_LOG": "error",
                    **(env or {})}
        self.data = os.path.join(self.home, "ledger")
        self.proc = subprocess.Popen(
            [bin_, "ledger", "serve", "--data", self.data, "--listen", "127.0.0.1:0", *extra],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            self.url = self.proc.stdout.readline().split()[-1]
            self.host, self.port = self.url.split("://")[1].split(":")
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

    def __init__(self, host, port, key, timeout=120, tls=None):
        if tls is None:
            self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        else:
            self.conn = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=tls)
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


def history(root, commits, files=300):
    """A repository whose commits each touch 2-4 of `files` files (some pairs together more
    often), written with fast-import and repacked as a clone holds it."""
    subprocess.run(["git", "init", "-q", "-b", "main", root], check=True)
    rnd = random.Random(7)
    names = [f"src/mod{i // 30}/file{i}.py" for i in range(files)]
    stream = []
    for c in range(commits):
        touched = rnd.sample(names, rnd.randint(2, 4)) if c else names
        if c and rnd.random() < 0.3:
            touched = [names[0], names[1]] + touched[:1]
        stream.append(f"commit refs/heads/main\ncommitter B <b@x> {1700000000 + c * 60} +0000\n")
        msg = f"change {c}\n"
        stream.append(f"data {len(msg)}\n{msg}")
        for n in dict.fromkeys(touched):
            body = f"# {n} at {c}\nvalue = {c}\n"
            stream.append(f"M 100644 inline {n}\ndata {len(body)}\n{body}")
        stream.append("\n")
    subprocess.run(["git", "fast-import", "--quiet"], input="".join(stream).encode(), cwd=root, check=True)
    subprocess.run(["git", "repack", "-adq"], cwd=root, check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, check=True)
    return names


def start_serve(binary, env, cwd):
    """`binary serve` started and its `initialize` answered: (the process, seconds taken)."""
    t = time.perf_counter()
    p = subprocess.Popen([binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, cwd=cwd, text=True, bufsize=1)
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}}) + "\n")
    p.stdin.flush()
    p.stdout.readline()
    return p, time.perf_counter() - t


def sh(env, *cmd, cwd=None):
    """A command that must succeed; its trimmed stdout."""
    return subprocess.run(cmd, env=env, cwd=cwd, check=True, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.strip()


def origin(env, root):
    """A bare `app.git` under `root` whose main holds one a.py, by the git CLI; its file:// URL."""
    seed = os.path.join(root, "seed")
    os.makedirs(seed)
    sh(env, "git", "init", "-q", "-b", "main", cwd=seed)
    with open(os.path.join(seed, "a.py"), "w") as f:
        f.write("x = 1\n")
    sh(env, "git", "add", "-A", cwd=seed)
    sh(env, "git", "commit", "-qm", "initial", cwd=seed)
    bare = os.path.join(root, "app.git")
    sh(env, "git", "clone", "-q", "--bare", seed, bare)
    return "file://" + bare


def cell_env(ledger):
    """The environment a cell (or a git step) runs in beside `ledger`: its HOME, a git identity
    of its own and no system config, the ledger's key and address."""
    gitconfig = os.path.join(ledger.home, ".gitconfig")
    with open(gitconfig, "w") as f:
        f.write("[user]\n\tname = Bench\n\temail = bench@example.invalid\n")
    return dict(ledger.env, GIT_CONFIG_GLOBAL=gitconfig, GIT_CONFIG_NOSYSTEM="1",
                METABOB_API_KEY=ledger.key,
                DISCOVERY_ENDPOINT=f"http://{ledger.host}:{ledger.port}")
