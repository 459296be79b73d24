#!/usr/bin/env python3
"""A stand-in for a coding agent CLI, so the agent recipes (examples/harness/) run end to end in
the tests without the real agent, its account or a model.

Usage: standin.py claude ARGS...   (what `claude` would get: --mcp-config FILE ... -p PROMPT)
       standin.py codex ARGS...    (what `codex` would get: exec --sandbox MODE ... PROMPT)

The shims `claude` and `codex` beside this file call it; a recipe finds them through CLAUDE_BIN
or CODEX_BIN. It does what the agent would do with the same command line:

- reads the MCP config the recipe wrote, in that agent's format (Claude Code: the JSON file of
  --mcp-config; Codex: $CODEX_HOME/config.toml), and takes the server named `metabob` from it;
- starts that server exactly as configured, with the environment that agent gives its servers
  (Claude Code: its own environment plus the entry's env; Codex: a short whitelist plus env),
  and speaks MCP to it with the official Python SDK: initialize, tools/list, init_workspace,
  get_problems on the task's files (which must show the task: proof the server reached the
  ledger), analyze_impact;
- reads the task from the prompt (context.md's "The task as recorded" block), appends a line to
  each of the task's files, and, as Claude Code, commits with the `Fixes-Finding:` trailer; as
  Codex it leaves the change uncommitted, as Codex's sandbox (a read-only .git) would.

STANDIN_EDIT=0 makes it change nothing (a run of the agent that found nothing to do). Any
failure exits 1 with one line on stderr, starting "standin: FAILED:".
"""

import json
import os
import re
import subprocess
import sys
import tomllib

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = "metabob"
TOOLS = ("init_workspace", "get_problems", "analyze_impact")
# The variables Codex passes to an MCP server it starts, besides the entry's own env.
CODEX_ENV_WHITELIST = ("HOME", "LOGNAME", "PATH", "SHELL", "USER", "LANG", "LC_ALL", "TERM",
                       "TMPDIR", "TZ")


class Failed(Exception):
    pass


def fail(msg):
    raise Failed(msg)


def tool_rules(text):
    """--allowedTools' rules: separated by commas or spaces, except inside a rule's parentheses
    (`Bash(git commit:*)`)."""
    rules, cur, depth = [], "", 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and (ch == "," or ch.isspace()):
            rules, cur = rules + [cur] if cur else rules, ""
        else:
            cur += ch
    return rules + [cur] if cur else rules


def parse_claude(args):
    """Claude Code's print mode, as the recipe calls it: the MCP config files, the prompt and
    what the agent may do without asking."""
    configs, prompt, allowed, mode, printing = [], None, [], "default", False
    takes_value = {"--model", "--max-turns", "--output-format", "--append-system-prompt"}
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--mcp-config":
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                configs.append(args[i])
                i += 1
            continue
        if a in ("-p", "--print"):
            printing = True
        elif a == "--strict-mcp-config" or a == "--verbose":
            pass
        elif a in ("--allowedTools", "--allowed-tools"):
            i += 1
            allowed += tool_rules(args[i] if i < len(args) else "")
        elif a == "--permission-mode":
            i += 1
            mode = args[i] if i < len(args) else ""
        elif a in takes_value:
            i += 1
        elif a.startswith("-"):
            fail(f"claude: unknown option {a}")
        elif prompt is None:
            prompt = a
        else:
            fail(f"claude: a second prompt argument {a[:40]!r}")
        i += 1
    if not printing:
        fail("claude: no -p: without print mode claude waits for a person at a terminal")
    if not prompt:
        fail("claude: -p without a prompt")
    if not configs:
        fail("claude: no --mcp-config: the metabob server is not configured")
    skip = mode == "bypassPermissions"
    if not skip and not any(t == f"mcp__{SERVER}" or t.startswith(f"mcp__{SERVER}__") for t in allowed):
        fail(f"claude: --allowedTools does not allow mcp__{SERVER}: -p would refuse every metabob tool call")
    if not skip and not any(t.startswith("Bash(git commit") for t in allowed):
        fail("claude: --allowedTools does not allow Bash(git commit:*): -p would refuse the commit")
    if not skip and mode != "acceptEdits" and "Edit" not in allowed:
        fail("claude: neither --permission-mode acceptEdits nor Edit: -p would refuse every edit")
    servers = {}
    for path in configs:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"claude: --mcp-config {path}: {e}")
        servers.update((doc.get("mcpServers") or {}) if isinstance(doc, dict) else {})
    entry = servers.get(SERVER)
    if not isinstance(entry, dict):
        fail(f"claude: no mcpServers.{SERVER} in {', '.join(configs)}")
    env = dict(os.environ)
    env.update(entry.get("env") or {})
    return prompt, entry, env, True


def parse_codex(args):
    """`codex exec`, as the recipe calls it, and the config.toml of its CODEX_HOME."""
    if not args or args[0] not in ("exec", "e"):
        fail(f"codex: expected `codex exec`, got {' '.join(args[:1]) or 'nothing'}")
    prompt, sandbox = None, "read-only"
    takes_value = {"--model", "-m", "--color", "--profile", "-p"}
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("--sandbox", "-s"):
            i += 1
            sandbox = args[i] if i < len(args) else ""
            if sandbox not in ("read-only", "workspace-write", "danger-full-access"):
                fail(f"codex: --sandbox {sandbox!r} is not a sandbox mode")
        elif a in ("--skip-git-repo-check", "--json", "--full-auto"):
            sandbox = "workspace-write" if a == "--full-auto" else sandbox
        elif a in takes_value:
            i += 1
        elif a.startswith("-") and a != "-":
            fail(f"codex: unknown option {a}")
        elif prompt is None:
            prompt = sys.stdin.read() if a == "-" else a
        else:
            fail(f"codex: a second prompt argument {a[:40]!r}")
        i += 1
    if not prompt:
        fail("codex: exec without a prompt")
    if sandbox == "read-only":
        fail("codex: the sandbox is read-only (no --sandbox workspace-write): it could not edit a file")
    home = os.environ.get("CODEX_HOME") or os.path.join(os.environ.get("HOME", ""), ".codex")
    path = os.path.join(home, "config.toml")
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"codex: {path}: {e}")
    entry = (doc.get("mcp_servers") or {}).get(SERVER)
    if not isinstance(entry, dict):
        fail(f"codex: no [mcp_servers.{SERVER}] in {path}")
    env = {k: os.environ[k] for k in CODEX_ENV_WHITELIST if k in os.environ}
    env.update(entry.get("env") or {})
    return prompt, entry, env, False


def task_of(prompt):
    """The task as context.md records it (its JSON block), which the recipe must have passed."""
    m = re.search(r"## The task as recorded\s*```json\s*(\{.*?\})\s*```", prompt, re.S)
    if not m:
        fail("the prompt holds no context.md (no \"The task as recorded\" block)")
    task = json.loads(m.group(1))
    if not task.get("task_id") or not task.get("files"):
        fail("the task in the prompt names no task_id or no files")
    return task


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)


async def use_tools(entry, env, task):
    """Starts the configured server and calls the tools an agent would before editing."""
    command = entry.get("command")
    if not command:
        fail(f"the {SERVER} entry names no command")
    args = [str(a) for a in entry.get("args") or []]
    shown = " ".join([command] + args)
    params = StdioServerParameters(command=command, args=args, env=env, cwd=os.getcwd())
    called = []
    try:
        with anyio.fail_after(120):
            async with stdio_client(params, errlog=sys.stderr) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    tools = {t.name for t in (await s.list_tools()).tools}
                    missing = [t for t in TOOLS if t not in tools]
                    if missing:
                        fail(f"`{shown}` serves no {', '.join(missing)}")

                    async def call(name, arguments):
                        r = await s.call_tool(name, arguments)
                        body = text_of(r)
                        if r.is_error:
                            fail(f"{name} answered an error: {body[:200]}")
                        called.append(name)
                        return body

                    await call("init_workspace", {"workspace_path": os.getcwd()})
                    for f in task["files"]:
                        body = await call("get_problems", {"file_path": f, "category": ["task"]})
                        if task["task_id"] not in body:
                            fail(f"get_problems on {f} does not show {task['task_id']}: the server "
                                 f"did not reach the ledger (is METABOB_API_KEY in its env?)")
                    await call("analyze_impact", {"changed_files": task["files"]})
    except BaseException as e:  # noqa: BLE001 - the SDK's task groups wrap whatever was raised
        inner = innermost(e)
        if isinstance(inner, Failed):
            raise inner from None
        text = " ".join(str(inner).split()) or type(inner).__name__
        fail(f"the MCP server `{shown}` failed: {type(inner).__name__}: {text[:300]}")
    return called


def innermost(e):
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def edit(task, agent):
    """Appends a line to each of the task's files that lies inside the clone."""
    edited = []
    for f in task["files"]:
        if f.startswith("/") or ".." in f.split("/"):
            fail(f"the task's file {f!r} is not a path inside the clone")
        os.makedirs(os.path.dirname(f) or ".", exist_ok=True)
        with open(f, "a") as out:
            out.write(f"# fixed by the {agent} stand-in for {task['task_id']}\n")
        edited.append(f)
    return edited


def git(*args):
    r = subprocess.run(["git", *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"git {' '.join(args[:2])}: {' '.join(r.stderr.split())[:200]}")


def main(argv):
    if len(argv) < 1 or argv[0] not in ("claude", "codex"):
        fail("usage: standin.py claude|codex ARGS...")
    agent, args = argv[0], argv[1:]
    prompt, entry, env, commits = (parse_claude if agent == "claude" else parse_codex)(args)
    task = task_of(prompt)
    called = anyio.run(use_tools, entry, env, task)
    if os.environ.get("STANDIN_EDIT", "1") == "0":
        print(f"standin: {agent}: called {', '.join(called)}; changed nothing", file=sys.stderr)
        return
    edited = edit(task, agent)
    if commits:
        git("add", "--", *edited)
        git("commit", "-q", "-m", f"Fix: {task.get('summary', 'the task')}",
            "-m", f"Fixes-Finding: {task['task_id']}")
    print(f"standin: {agent}: called {', '.join(called)}; edited {', '.join(edited)}; "
          f"{'committed' if commits else 'left uncommitted'}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failed as e:
        print(f"standin: FAILED: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)
