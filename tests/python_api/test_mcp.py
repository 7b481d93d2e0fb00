# SPDX-License-Identifier: Apache-2.0
"""The MCP endpoint (docs/mcp.md) with a client nobody here wrote: the official Python SDK
(`mcp` 2.x) in its automatic mode (the stateless 2026-07-28 revision) and its legacy mode
(the initialize handshake) lists the tools with their schemas and calls them; a generator's
items arrive as progress; and the shared vectors of tests/vectors/mcp hold for the Python
server too."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ucall import RPCError, Server

mcp = pytest.importorskip("mcp", reason="the official MCP SDK (requirements-dev.txt)")
from mcp import Client  # noqa: E402

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "mcp"


@dataclass
class Point:
    x: float
    y: float


def tools_server(make_server: Any, **options: Any) -> Server:
    server: Server = make_server(mcp=True, **options)

    @server
    def add(a: int, b: int = 0) -> int:
        """Add two integers.

        Returns their sum."""
        return a + b

    @server
    def scale(point: Point, factor: float) -> Point:
        """Scale a point."""
        return Point(point.x * factor, point.y * factor)

    @server
    def shout(text: str) -> dict[str, str]:
        return {"loud": text.upper()}

    @server
    def broken() -> int:
        raise ValueError("this tool is broken")

    @server
    def refuse() -> None:
        raise RPCError(-32001, "not today", {"why": "asked"})

    @server
    def count(n: int):  # type: ignore[no-untyped-def]
        for i in range(n):
            yield f"step {i}"
        return n

    # The vector procedures (tests/vectors/README.md) the MCP vectors call.
    @server
    def subtract(minuend: float, subtrahend: float) -> float:
        return minuend - subtrahend

    @server
    def echo(data: Any) -> Any:
        return data

    @server
    def fail() -> None:
        raise RPCError(-32001, "boom", {"why": "asked to fail"})

    server.start()
    return server


async def exercise(url: str, mode: str) -> dict[str, Any]:
    async with Client(url, mode=mode) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        added = await client.call_tool("add", {"a": 2, "b": 3})
        scaled = await client.call_tool("scale", {"point": {"x": 1, "y": 2}, "factor": 2})
        shouted = await client.call_tool("shout", {"text": "hi"})
        broken = await client.call_tool("broken", {})
        refused = await client.call_tool("refuse", {})
        invalid = await client.call_tool("add", {"a": "two"})
        progress: list[tuple[float, str | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, message))

        counted = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
        return {
            "tools": tools,
            "added": added,
            "scaled": scaled,
            "shouted": shouted,
            "broken": broken,
            "refused": refused,
            "invalid": invalid,
            "counted": counted,
            "progress": progress,
        }


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_official_sdk_lists_and_calls_the_tools(make_server: Any, mode: str) -> None:
    server = tools_server(make_server)
    seen = asyncio.run(exercise(f"http://127.0.0.1:{server.port}/mcp", mode))
    tools = seen["tools"]
    assert {"add", "scale", "shout", "broken", "count", "echo"} <= set(tools)
    assert not any(name.startswith("rpc.") for name in tools)
    add = tools["add"]
    assert add.description.startswith("Add two integers.")
    assert add.input_schema["type"] == "object"
    assert add.input_schema["required"] == ["a"]
    assert add.input_schema["properties"]["a"]["type"] == "integer"
    assert add.input_schema["properties"]["b"]["default"] == 0
    assert add.output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
    }
    # An object result is the structured content as it is.
    assert tools["scale"].output_schema["type"] == "object"
    assert seen["added"].structured_content == {"result": 5}
    assert seen["added"].is_error is False
    assert json.loads(seen["added"].content[0].text) == {"result": 5}
    assert seen["scaled"].structured_content == {"x": 2.0, "y": 4.0}
    assert seen["shouted"].structured_content == {"loud": "HI"}
    assert seen["broken"].is_error is True
    assert seen["refused"].is_error is True
    assert "not today" in seen["refused"].content[0].text
    assert seen["invalid"].is_error is True
    assert seen["counted"].structured_content == {"result": 3}
    assert [message for _, message in seen["progress"]] == ["step 0", "step 1", "step 2"]
    assert [value for value, _ in seen["progress"]] == [1, 2, 3]


def test_the_cli_flag_turns_the_endpoint_on(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ucall import cli

    module = tmp_path / "mcp_cli_app.py"
    module.write_text(
        "from ucall import Server\nserver = Server(port=0)\n\n@server\ndef hello() -> str:\n    return 'hi'\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import importlib

        app = importlib.import_module("mcp_cli_app")
        assert app.server._mcp is None
        started: list[int] = []

        def run(ready: Any = None) -> None:  # stands in for serving: record and return
            started.append(1)
            assert app.server._mcp == {"path": "/tools"}

        app.server.run = run  # type: ignore[method-assign]
        result = CliRunner().invoke(cli.main, ["serve", "mcp_cli_app:server", "--mcp-path", "/tools"])
        assert result.exit_code == 0, result.output
        assert started == [1]
        # --mcp-sessions turns sessions on (and the endpoint, where it was off), path kept.
        app.server._mcp = None

        def run_with_sessions(ready: Any = None) -> None:
            started.append(2)
            assert app.server._mcp == {"path": "/mcp", "sessions": True}

        app.server.run = run_with_sessions  # type: ignore[method-assign]
        result = CliRunner().invoke(cli.main, ["serve", "mcp_cli_app:server", "--mcp-sessions"])
        assert result.exit_code == 0, result.output
        assert started == [1, 2]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mcp_cli_app", None)


def differences(expected: Any, actual: Any, at: str = "reply") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{at}.{key} missing")
            else:
                out += differences(value, actual[key], f"{at}.{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for n, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{at}[{n}]")]
    return [] if expected == actual else [f"{at}: expected {expected!r}, got {actual!r}"]


def test_every_vector_holds_for_the_python_server(make_server: Any) -> None:
    server = tools_server(make_server)
    files = sorted(VECTORS.glob("*.json"))
    assert len(files) >= 20
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for path in files:
            vector = json.loads(path.read_text())
            headers = {"Content-Type": "application/json", **vector["headers"]}
            connection.request("POST", "/mcp", vector["request"].encode(), headers)
            response = connection.getresponse()
            body = response.read()
            assert response.status == vector["status"], (path.name, response.status, body)
            if "reply" not in vector:
                assert body == b"", path.name
            else:
                problems = differences(vector["reply"], json.loads(body))
                assert not problems, (path.name, problems, body)
    finally:
        connection.close()


def test_auth_middleware_applies_and_a_refused_token_is_401(make_server: Any) -> None:
    from ucall import auth

    server = tools_server(make_server)
    server.stop()
    guarded: Server = make_server(mcp=True)
    guarded.middleware(auth.bearer("t0ken"))

    @guarded
    def secret() -> str:
        return "in"

    guarded.start()
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "secret", "arguments": {}}}
    )
    connection = http.client.HTTPConnection("127.0.0.1", guarded.port, timeout=10)
    try:
        connection.request("POST", "/mcp", body, {"Content-Type": "application/json"})
        refused = connection.getresponse()
        refused.read()
        assert refused.status == 401
        assert (refused.getheader("WWW-Authenticate") or "").startswith("Bearer")
        connection.request("POST", "/mcp", body, {"Content-Type": "application/json", "Authorization": "Bearer t0ken"})
        allowed = connection.getresponse()
        reply = json.loads(allowed.read())
        assert allowed.status == 200
        assert reply["result"]["structuredContent"] == {"result": "in"}
    finally:
        connection.close()


APP = '''
from ucall import Server

server = Server(port=0)
print("imported")  # must not reach stdout


@server
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@server
def count(n: int):
    for i in range(n):
        yield f"step {i}"
    return n
'''


def test_stdio_serves_the_same_tools_to_the_sdk_stdio_client(tmp_path: Path) -> None:
    import os
    import sys

    from mcp import StdioServerParameters

    (tmp_path / "stdio_app.py").write_text(APP)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ucall", "mcp", "stdio_app:server"],
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )

    async def exercise(mode: str) -> tuple[Any, Any, list[str | None]]:
        progress: list[str | None] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(message)

        async with Client(params, mode=mode) as client:
            listed = await client.list_tools()
            added = await client.call_tool("add", {"a": 4, "b": 5})
            await client.call_tool("count", {"n": 2}, progress_callback=on_progress)
            return listed, added, progress

    for mode in ("auto", "legacy"):
        listed, added, progress = asyncio.run(exercise(mode))
        assert sorted(tool.name for tool in listed.tools) == ["add", "count"], mode
        assert added.structured_content == {"result": 9}, mode
        assert progress == ["step 0", "step 1"], mode


def test_the_typescript_sdk_client_over_streamable_http(make_server: Any) -> None:
    import shutil
    import subprocess

    node = shutil.which("node")
    script = Path(__file__).resolve().parents[1] / "node" / "mcp_client.mjs"
    sdk = script.parent / "node_modules" / "@modelcontextprotocol" / "sdk"
    if node is None or not sdk.is_dir():
        pytest.skip("node and tests/node's npm packages (make setup) are needed")
    server = tools_server(make_server)
    url = f"http://127.0.0.1:{server.port}/mcp"
    calls = ["add", '{"a": 20, "b": 22}', "shout", '{"text": "ts"}', "broken", "{}", "count", '{"n": 2}']
    done = subprocess.run([node, str(script), url, *calls], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    tools = {tool["name"]: tool for tool in seen["tools"]}
    assert tools["add"]["inputSchema"]["required"] == ["a"]
    results = {call["name"]: call for call in seen["calls"]}
    assert results["add"]["result"]["structuredContent"] == {"result": 42}
    assert results["shout"]["result"]["structuredContent"] == {"loud": "TS"}
    assert results["broken"]["result"]["isError"] is True
    assert results["count"]["result"]["structuredContent"] == {"result": 2}
    assert [p["message"] for p in results["count"]["progress"]] == ["step 0", "step 1"]


def test_closing_the_stream_stops_a_generator_tool(make_server: Any) -> None:
    import socket
    import threading
    import time

    stopped = threading.Event()
    server: Server = make_server(mcp=True)

    @server
    def ticks():  # type: ignore[no-untyped-def]
        try:
            while True:
                time.sleep(0.01)
                yield "tick"
        finally:
            stopped.set()

    server.start()
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "ticks", "arguments": {}, "_meta": {"progressToken": 7}},
        }
    ).encode()
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        received = b""
        while b"notifications/progress" not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
        assert b"text/event-stream" in received
    # The client hung up: MCP takes that as cancellation, and the generator is stopped.
    assert stopped.wait(10)


def test_cancelled_over_stdio_stops_a_generator_tool(tmp_path: Path) -> None:
    import time

    marker = tmp_path / "stopped"
    app = (
        "import time\nfrom ucall import Server\nserver = Server(port=0)\n\n\n@server\ndef ticks():\n"
        "    try:\n        while True:\n            time.sleep(0.01)\n            yield 'tick'\n"
        f"    finally:\n        open({str(marker)!r}, 'w').close()\n"
    )
    with mcp_over_stdio(tmp_path, app) as process:
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "ticks", "arguments": {}, "_meta": {"progressToken": "t"}},
        }
        process.stdin.write(json.dumps(call).encode() + b"\n")
        process.stdin.flush()
        first = json.loads(process.stdout.readline())
        assert first["method"] == "notifications/progress", first
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
        process.stdin.write(json.dumps(cancel).encode() + b"\n")
        process.stdin.flush()
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the generator was not stopped"


CANCEL_APP = """
import asyncio
import sys

from ucall import Context, Server

server = Server(port=0)


@server
async def wait(ctx: Context) -> bool:
    print("wait: started", file=sys.stderr, flush=True)
    for _ in range(2000):
        if ctx.caller_gone:
            print("wait: caller gone", file=sys.stderr, flush=True)
            return True
        await asyncio.sleep(0.01)
    return False


@server
async def nap(ctx: Context, seconds: float) -> bool:
    await asyncio.sleep(seconds)
    return ctx.caller_gone
"""


@contextlib.contextmanager
def mcp_over_stdio(tmp_path: Path, app: str) -> Iterator[subprocess.Popen[bytes]]:
    """``ucall mcp`` serving ``app`` (a module's text, its ``server``) over stdio, its
    standard error in ``tmp_path / "stderr"``; on leaving, its input closed and the process
    waited for (killed after 15 s)."""
    (tmp_path / "stdio_app.py").write_text(app)
    with (tmp_path / "stderr").open("wb") as errors:  # the child keeps its own copy
        process = subprocess.Popen(
            [sys.executable, "-m", "ucall", "mcp", "stdio_app:server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(tmp_path)},
        )
    assert process.stdin is not None and process.stdout is not None
    try:
        yield process
    finally:
        if not process.stdin.closed:
            process.stdin.close()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def test_cancelled_over_stdio_reaches_only_its_call_and_gets_no_response(tmp_path: Path) -> None:
    """Over stdio (one stream for every call), ``notifications/cancelled`` names one of two
    calls under way: its handler sees its caller gone and no line answers it; the other
    call's caller stays, and its result arrives."""
    import time

    with mcp_over_stdio(tmp_path, CANCEL_APP) as process:
        assert process.stdin is not None and process.stdout is not None

        def send(message: Any) -> None:
            process.stdin.write(json.dumps(message).encode() + b"\n")
            process.stdin.flush()

        def call(id: int, name: str, arguments: Any) -> Any:
            return {
                "jsonrpc": "2.0",
                "id": id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }

        def wait_for_stderr(text: str) -> None:
            deadline = time.monotonic() + 10
            while text not in (tmp_path / "stderr").read_text() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert text in (tmp_path / "stderr").read_text(), (tmp_path / "stderr").read_text()

        send(call(1, "wait", {}))
        send(call(2, "nap", {"seconds": 1.5}))
        wait_for_stderr("wait: started")  # cancel a call under way, however slow the start
        send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "user"}})
        lines = []
        while not any(line.get("id") == 2 for line in lines):
            line = process.stdout.readline()
            assert line, f"the output ended: {lines}"
            lines.append(json.loads(line))
        assert lines[-1]["result"]["structuredContent"] == {"result": False}, lines
        wait_for_stderr("wait: caller gone")
        process.stdin.close()
        rest = [json.loads(line) for line in process.stdout.read().splitlines() if line.strip()]
        assert all(message.get("id") != 1 for message in lines + rest), lines + rest


def test_the_sdk_abandoning_one_of_two_calls_over_stdio_cancels_only_it(tmp_path: Path) -> None:
    """The official SDK's stdio client gives up one of two calls (a timeout), which it
    says with ``notifications/cancelled``: only that call's handler sees its caller gone."""
    import os
    import sys

    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    (tmp_path / "cancel_two.py").write_text(CANCEL_APP)
    errors = (tmp_path / "stderr").open("w")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ucall", "mcp", "cancel_two:server"],
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )

    async def give_one_up() -> Any:
        async with Client(stdio_client(params, errlog=errors), mode="legacy") as client:
            other = asyncio.create_task(client.call_tool("nap", {"seconds": 1.5}))
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await asyncio.wait_for(client.call_tool("wait", {}), 0.5)
            return await other

    try:
        napped = asyncio.run(give_one_up())
    finally:
        errors.close()
    assert napped.structured_content == {"result": False}, napped
    assert "wait: caller gone" in (tmp_path / "stderr").read_text()


def waiting_server(make_server: Any, gone: Any, sessions: bool = True) -> Server:
    """A server (with sessions unless told) whose tool ``wait`` runs until its caller has
    gone (at most 20 s), then sets ``gone`` and answers whether it saw that; and whose tool
    ``nap`` sleeps ``seconds`` and answers whether its caller went meanwhile."""
    from ucall import Context

    server: Server = make_server(mcp=True, mcp_sessions=sessions)

    @server
    async def nap(ctx: Context, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return ctx.caller_gone

    @server
    async def wait(ctx: Context) -> bool:
        for _ in range(2000):
            if ctx.caller_gone:
                gone.set()
                return True
            await asyncio.sleep(0.01)
        return False

    @server
    def add(a: int, b: int = 0) -> int:
        return a + b

    server.start()
    return server


def mcp_exchange(port: int, body: Any, session: str | None = None) -> tuple[http.client.HTTPResponse, bytes]:
    """POST `body` to the MCP endpoint (in `session`): the response and its body."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers["MCP-Protocol-Version"] = "2025-06-18"
    if session is not None:
        headers["Mcp-Session-Id"] = session
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", "/mcp", json.dumps(body), headers)
        reply = connection.getresponse()
        return reply, reply.read()
    finally:
        connection.close()


def mcp_post(port: int, body: Any, session: str | None = None) -> tuple[int, Any, str | None]:
    reply, data = mcp_exchange(port, body, session)
    return reply.status, json.loads(data) if data else None, reply.getheader("Mcp-Session-Id")


def test_sessions_with_the_sdk_in_both_modes(make_server: Any) -> None:
    """With ``mcp_sessions=True`` the SDK's legacy mode gets an ``Mcp-Session-Id`` at
    initialize and sends it on; the automatic mode (stateless) needs none."""
    import threading

    server = waiting_server(make_server, threading.Event())

    async def use(mode: str) -> Any:
        async with Client(f"http://127.0.0.1:{server.port}/mcp", mode=mode) as client:
            return (await client.call_tool("add", {"a": 2, "b": 3})).structured_content

    assert asyncio.run(use("legacy")) == {"result": 5}
    assert asyncio.run(use("auto")) == {"result": 5}
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    status, _, session = mcp_post(server.port, initialize)
    assert status == 200 and session is not None and len(session) == 32
    listed = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert mcp_post(server.port, listed)[0] == 400
    assert mcp_post(server.port, listed, session)[0] == 200
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request("DELETE", "/mcp", headers={"Mcp-Session-Id": session})
    assert connection.getresponse().status == 204
    connection.close()
    assert mcp_post(server.port, listed, session)[0] == 404


def test_the_sdk_abandoning_a_call_reaches_the_handler_as_its_caller_gone(make_server: Any) -> None:
    """The SDK in legacy mode gives up on a call (a timeout): the handler sees its caller
    gone (by the courtesy ``notifications/cancelled`` in its session, or the stream closing)."""
    import threading

    gone = threading.Event()
    server = waiting_server(make_server, gone)

    async def give_up() -> None:
        async with Client(f"http://127.0.0.1:{server.port}/mcp", mode="legacy") as client:
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await asyncio.wait_for(client.call_tool("wait", {}), 0.5)
            assert (await client.call_tool("add", {"a": 1})).structured_content == {"result": 1}
            # Stay connected until the handler has seen it: the abandoned call's late reply
            # then reaches an open client (one closing meanwhile fails in the SDK's own task).
            assert await asyncio.get_running_loop().run_in_executor(None, gone.wait, 10)
            await asyncio.sleep(0.2)

    asyncio.run(give_up())


@pytest.mark.parametrize(("mode", "sessions"), [("legacy", True), ("auto", False)])
def test_the_sdk_abandoning_one_of_two_calls_cancels_only_it(make_server: Any, mode: str, sessions: bool) -> None:
    """Two calls under way; the SDK gives one up (a timeout): in legacy mode by a
    ``notifications/cancelled`` in its session, in automatic mode (2026-07-28, no session)
    by closing that call's stream. Its handler sees its caller gone; the other call's does
    not, and its result arrives."""
    import threading

    gone = threading.Event()
    server = waiting_server(make_server, gone, sessions=sessions)

    async def give_one_up() -> Any:
        async with Client(f"http://127.0.0.1:{server.port}/mcp", mode=mode) as client:
            other = asyncio.create_task(client.call_tool("nap", {"seconds": 1.5}))
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await asyncio.wait_for(client.call_tool("wait", {}), 0.5)
            assert await asyncio.get_running_loop().run_in_executor(None, gone.wait, 10)
            napped = await other
            await asyncio.sleep(0.2)  # the abandoned call's end reaches an open client
            return napped

    napped = asyncio.run(give_one_up())
    assert not napped.is_error, napped
    assert napped.structured_content == {"result": False}, "the other call's caller stayed"


def test_the_typescript_sdk_abandoning_one_of_two_calls_cancels_only_it(make_server: Any) -> None:
    """The official TypeScript SDK's client aborts one of two calls under way: its
    ``notifications/cancelled`` in the session reaches that call's handler alone, the other
    call's result arrives, and the SDK reports no stray response."""
    import shutil
    import subprocess
    import threading

    node = shutil.which("node")
    script = Path(__file__).resolve().parents[1] / "node" / "mcp_cancel.mjs"
    sdk = script.parent / "node_modules" / "@modelcontextprotocol" / "sdk"
    if node is None or not sdk.is_dir():
        pytest.skip("node and tests/node's npm packages (make setup) are needed")
    gone = threading.Event()
    server = waiting_server(make_server, gone)
    url = f"http://127.0.0.1:{server.port}/mcp"
    done = subprocess.run([node, str(script), url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["sessionId"] is not None, seen
    assert "the user stopped it" in seen["wait"]["error"], seen
    assert gone.wait(10), "the aborted call's handler saw its caller gone"
    assert seen["nap"]["structuredContent"] == {"result": False}, seen
    assert seen["errors"] == [], seen


def test_a_cancellation_posted_in_the_session_reaches_the_call(make_server: Any) -> None:
    """``notifications/cancelled`` on another connection, in the call's session, while the
    call's own connection stays open: the handler sees its caller gone, and no response is
    sent for the call (its POST is answered with an event stream that holds none)."""
    import threading

    gone = threading.Event()
    server = waiting_server(make_server, gone)
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    session = mcp_post(server.port, initialize)[2]
    replies: list[Any] = []
    call = {"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
    caller = threading.Thread(target=lambda: replies.append(mcp_exchange(server.port, call, session)))
    caller.start()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}}
    assert mcp_post(server.port, cancel, session)[0] == 202
    assert not gone.wait(0.5), "another id's cancellation leaves the call alone"
    cancel["params"] = {"requestId": 42, "reason": "the user stopped it"}
    assert mcp_post(server.port, cancel, session)[0] == 202
    assert gone.wait(10)
    caller.join(10)
    reply, body = replies[0]
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    assert body == b"", body
