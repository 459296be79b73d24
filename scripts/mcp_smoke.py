#!/usr/bin/env python3
"""Drives the built binary with the official MCP Python SDK (a third-party client).

Usage: mcp_smoke.py BINARY WORKSPACE

Starts an embedded ledger in a scratch HOME that forwards the gap store's and the memory store's
shapes to the fixture producer (tests/support/producer.py), then over stdio: initialize,
tools/list, init_workspace on WORKSPACE (a real git checkout), search_codebase,
predict_cochanges, record_finding, get_problems, and every substrate tool: the seven concept
tools, registry_query, the goal tools on the ledger's goal board, execution_trace,
resolve_impulse, path_activity and the agent-resolver queue; then MCP over HTTP with the SDK's
HTTP client. The server's stdout is
teed to a file and every line of it must be a JSON-RPC message. Exits non-zero with the reason on
the first failure.
"""

import json
import os
import shlex
import subprocess
import sys
import tempfile

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def fail(msg):
    print(f"mcp_smoke: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


async def session(binary, workspace, env, stdout_log, errlog):
    # tee keeps a copy of exactly what the server wrote to stdout.
    cmd = f"{shlex.quote(binary)} serve | tee {shlex.quote(stdout_log)}"
    params = StdioServerParameters(command="sh", args=["-c", cmd], env=env, cwd=workspace)
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            if "attach --check" not in (init.instructions or ""):
                fail(f"initialize carried no instructions: {init.instructions!r}")
            tools = {t.name for t in (await s.list_tools()).tools}
            for want in ("init_workspace", "search_codebase", "predict_cochanges",
                         "record_finding", "get_problems", "mark_complete", "claim_finding"):
                if want not in tools:
                    fail(f"tools/list lacks {want}: {sorted(tools)}")

            async def call(name, args):
                r = await s.call_tool(name, args)
                body = text_of(r)
                if r.is_error:
                    fail(f"{name} answered an error: {body}")
                return body

            body = await call("init_workspace", {"workspace_path": workspace})
            if "Code graph:" not in body or " 0 files" in body:
                fail(f"init_workspace indexed nothing: {body}")
            body = await call("search_codebase", {"query": "mine cochanges", "target": "components"})
            if "mine_cochanges" not in body:
                fail(f"search_codebase did not find mine_cochanges: {body}")
            body = await call("predict_cochanges", {"changed_files": ["Cargo.toml"], "confidence_threshold": 0.1})
            if "Files that changed with Cargo.toml" not in body:
                fail(f"predict_cochanges found no co-change: {body}")
            body = await call("record_finding", {
                "files": ["src/main.rs"], "summary": "smoke test finding", "severity": "LOW",
                "category": "smoke"})
            if "Shared on the ledger as concept" not in body:
                fail(f"record_finding did not share: {body}")
            body = await call("get_problems", {"file_path": "src/main.rs"})
            if "smoke test finding" not in body or "recorded by agents on this codebase" not in body:
                fail(f"get_problems does not show the finding: {body}")
            r = await s.call_tool("get_problems", {"limit": 1000})
            if not r.is_error:
                fail("an out-of-range limit was accepted")
            await substrate_tools(s, call)


async def refused(s, name, args, want):
    r = await s.call_tool(name, args)
    body = text_of(r)
    if not r.is_error or want not in body:
        fail(f"{name} was not refused with {want!r}: {body}")
    return body


async def substrate_tools(s, call):
    """The concept graph, the registry, traces, the escape hatch and path_activity."""
    ids = []
    for text in ("retries: send a write once, never again", "retries: reads back off"):
        body = await call("concept_create", {"content": text, "shape": "memo", "source_type": "memo",
                                             "summary": text})
        ids.append(body.split()[2].rstrip(":"))
    a, b = ids
    body = await call("concept_search", {"query": "write once"})
    if a not in body:
        fail(f"concept_search by query did not find {a}: {body}")
    body = await call("concept_search", {"concept_id": f"concept:{b}"})
    if b not in body or "reads back off" not in body:
        fail(f"concept_search by id did not read {b}: {body}")
    link = {"from_concept_id": a, "to_concept_id": b, "edge_type": "sequence_next"}
    await call("concept_link", link)
    body = await call("concept_link", link)
    if "already existed" not in body:
        fail(f"a repeated concept_link did not say the edge exists: {body}")
    body = await call("concept_neighbors", {"concept_id": a})
    if b not in body:
        fail(f"concept_neighbors does not show {b}: {body}")
    body = await call("concept_sequence", {"concept_id": a})
    if b not in body:
        fail(f"concept_sequence does not show {b}: {body}")
    await call("concept_record_usage", {"concept_id": a, "outcome": "success", "trace_id": "smoke-trace"})
    body = await call("concept_usage_stats", {"concept_id": a})
    if "smoke-trace" not in body:
        fail(f"concept_usage_stats lacks the usage row: {body}")
    await refused(s, "concept_create", {"content": "token ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2,
                                        "shape": "memo", "source_type": "memo"}, "outgoing_secret")
    body = await call("registry_query", {"mode": "shapes"})
    for shape in ("conceptSearch", "substrateGap"):
        if shape not in body:
            fail(f"registry_query shapes lacks {shape}: {body}")
    body = await call("registry_query", {"mode": "vessels", "shape": "conceptSearch"})
    if "metabob-ledger" not in body:
        fail(f"registry_query vessels does not name the ledger: {body}")
    await goal_tools(s, call)
    await refused(s, "resolve_impulse", {"shape": "bash"}, "goal")
    await refused(s, "resolve_impulse", {"shape": "concept_write"}, "concept_create")
    body = await call("resolve_impulse", {"shape": "memoryNote", "pointer": {"key": "smoke"}})
    if "a note from the fixture" not in body:
        fail(f"resolve_impulse did not pass the read to its producer: {body}")
    body = await call("path_activity", {"paths": ["repos/smoke/src/main.rs"]})
    if "gap_smoke" not in body:
        fail(f"path_activity does not list the fixture's gap: {body}")
    body = await call("pull_assigned_work", {})
    if "advertises no" not in body:
        fail(f"an empty pull_assigned_work did not say why: {body}")
    await refused(s, "submit_resolution", {"task_id": "task_unknown", "outcome": "declined"}, "task_unknown")


async def goal_tools(s, call):
    """The goal loop on the embedded ledger's goal board: a dispatch becomes a task, and its walk
    reads running until a cell takes and closes it (which the Rust tests drive)."""
    body = await call("run_goal_async", {"goal": "make main say hello",
                                         "variables": {"repo": "https://git.example/smoke.git", "files": ["src/main.rs"]},
                                         "learning_mode": "observe"})
    dispatch = next((w.strip(".,:;()") for w in body.split() if w.startswith("dispatch_")), None)
    if not dispatch or "as requested" not in body:
        fail(f"run_goal_async named no dispatch or claimed the learning mode applied: {body}")
    body = await call("goal_status", {"dispatch_id": dispatch})
    if not body.startswith("reached: (running)"):
        fail(f"goal_status does not lead with reached: {body}")
    body = await call("goal_reasoning", {"dispatch_id": dispatch})
    if "still running" not in body:
        fail(f"goal_reasoning of a running dispatch: {body}")
    await refused(s, "provide_feedback", {"dispatch_id": dispatch, "verdict": "reached",
                                          "rationale": "not yet"}, "running")
    body = await call("execution_trace", {})
    if "No execution trace is recorded" not in body:
        fail(f"execution_trace did not answer from the goal board: {body}")


# What the fixture producer answers for the shapes the embedded ledger does not serve.
FIXTURES = {
    "substrateGap": {"body": {"gaps": [{"id": "gap_smoke", "category": "bug", "route": "auto",
                                        "classification_metadata": {"edit_site": "repos/smoke/src/main.rs"}}]}},
    "memoryNote": {"body": {"note": "a note from the fixture"}},
}


async def http_session(binary, workspace, env, tmp):
    """MCP over HTTP: `serve --http 127.0.0.1:0` driven by the SDK's streamable HTTP client (the
    server is stateless and answers each POST with one JSON body): initialize, tools/list and a
    get_metrics call, then SIGTERM ends the server with exit 0."""
    import time
    from mcp.client.streamable_http import streamable_http_client

    errpath = os.path.join(tmp, "http-stderr.log")
    with open(errpath, "w", encoding="utf-8") as errlog:
        server = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0", "--no-resolver"],
                                  env=env, cwd=workspace, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=errlog)
    try:
        url = None
        for _ in range(600):
            for line in open(errpath, encoding="utf-8").read().splitlines():
                if line.startswith("metabob-mcp: MCP over HTTP on "):
                    url = line.split()[-1]
            if url or server.poll() is not None:
                break
            time.sleep(0.05)
        if not url:
            fail(f"serve --http announced no address: {open(errpath, encoding='utf-8').read()[-2000:]}")
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                if "attach --check" not in (init.instructions or ""):
                    fail(f"initialize over HTTP carried no instructions: {init.instructions!r}")
                tools = {t.name for t in (await s.list_tools()).tools}
                for want in ("init_workspace", "get_metrics", "record_finding", "pull_assigned_work"):
                    if want not in tools:
                        fail(f"tools/list over HTTP lacks {want}: {sorted(tools)}")
                r = await s.call_tool("get_metrics", {})
                if r.is_error or "Code graph" not in text_of(r):
                    fail(f"get_metrics over HTTP: {text_of(r)}")
    finally:
        server.terminate()
        code = server.wait()
    if code != 0:
        fail(f"serve --http exited {code} on SIGTERM")


def main():
    binary, workspace = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="mcp-smoke-") as tmp:
        env = {"HOME": tmp, "PATH": os.environ.get("PATH", ""), "RUST_LOG": "info",
               "METABOB_NO_SYSTEM_CA": "1", "METABOB_CACHE_DIR": os.path.join(tmp, "cache")}
        fixtures = os.path.join(tmp, "fixtures.json")
        with open(fixtures, "w", encoding="utf-8") as f:
            json.dump(FIXTURES, f)
        producer = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "..", "tests", "support", "producer.py"), fixtures],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        url = "http://127.0.0.1:" + producer.stdout.readline().split()[-1]
        forwarded = [a for shape in FIXTURES for a in ("--producer", f"{shape}={url}")]
        ledger = subprocess.Popen(
            [binary, "ledger", "serve", "--data", os.path.join(tmp, "ledger"), "--listen", "127.0.0.1:0", *forwarded],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            first = ledger.stdout.readline()
            if "http://" not in first:
                fail(f"the ledger did not start: {first!r}")
            stdout_log = os.path.join(tmp, "stdout.jsonl")
            # The server logs at info on stderr, to show that logging stays off stdout.
            with open(os.path.join(tmp, "stderr.log"), "w", encoding="utf-8") as errlog:
                anyio.run(session, binary, workspace, env, stdout_log, errlog)
            anyio.run(http_session, binary, workspace, env, tmp)
            lines = [l for l in open(stdout_log, encoding="utf-8").read().splitlines() if l.strip()]
            if len(lines) < 8:
                fail(f"stdout holds only {len(lines)} lines")
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    fail(f"stdout carried a line that is not JSON: {line[:200]!r}")
                if msg.get("jsonrpc") != "2.0":
                    fail(f"stdout carried a non-JSON-RPC message: {line[:200]!r}")
        finally:
            ledger.terminate()
            ledger.wait()
            producer.terminate()
            producer.wait()
    print(f"mcp_smoke: ok ({len(lines)} JSON-RPC lines on stdout)")


if __name__ == "__main__":
    main()
