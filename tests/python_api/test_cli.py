# SPDX-License-Identifier: Apache-2.0
"""The `ucall` command: the published call form, additions, and `ucall serve`."""

import http.client
import inspect
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from click.testing import CliRunner
from conftest import REPO_ROOT, Recorder, once, serving, tcp_exchange, with_client_procedures
from test_workers import supervised

from ucall import Server
from ucall._ucall import __version__
from ucall.cli import main, serve


@pytest.fixture
def port(make_server):
    return with_client_procedures(make_server()).start().port


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_named_and_typed_params(port):
    code, out, _ = run("sum", "a=1", "b=2", "-p", port)
    assert code == 0 and json.loads(out) == {"jsonrpc": "2.0", "id": 1, "result": 3}
    code, out, _ = run("kinds", "a=1", "b=1.5", "c=true", "d=text", "e:str=256", "f:float=2", "g:=[1,{}]", "-p", port)
    assert json.loads(out)["result"] == {
        "a": "int", "b": "float", "c": "bool", "d": "str", "e": "str", "f": "float", "g": "list"
    }
    code, out, _ = run("kinds", "zip=0123", "n=-7", "x=0.5", "y=00.5", "z=1e3", "-p", port)
    assert json.loads(out)["result"] == {"zip": "str", "n": "int", "x": "float", "y": "str", "z": "float"}
    code, out, _ = run("echo", "data:=" + json.dumps({"x": [1, None]}), "--format", "json", "-p", port)
    assert code == 0 and json.loads(out) == {"x": [1, None]}


def test_positional_params_and_tcp(port):
    code, out, _ = run("sum", "--positional", "40", "2:int", "--format", "json", "-p", port, "--tcp")
    assert code == 0 and out.strip() == "42"


def test_errors_exit_non_zero_with_a_message(port):
    code, out, err = run("sum", "a=x", "b=1", "-p", port)
    assert code == 1 and "-32602" in err and "'a'" in err
    code, _, err = run("nope", "-p", port, "--format", "json")
    assert code == 1 and "Method not found" in err
    code, _, err = run("sum", "a=1", "--uri", "127.0.0.1", "-p", "1", "--timeout", "2")
    assert code == 2 and "cannot connect" in err
    code, _, err = run("sum", "oops", "-p", port)
    assert code == 2 and "KEY=VALUE" in err
    for output_format in ("bytes", "numpy", "image"):
        code, _, err = run("sum", "a=1", "b=2", "-p", port, "--format", output_format)
        assert code == 2 and "the result is 3, not bytes (a base64 string)" in err, (output_format, err)


@pytest.mark.parametrize("transport", [[], ["--tcp"]])
def test_stream_prints_items_as_json_lines(make_server, transport):
    """``--stream`` reads a procedure that yields: its items, then its result, a JSON line
    each; without it such a call fails with a hint to use it."""
    np = pytest.importorskip("numpy")
    server = make_server()

    @server
    def count(n: int):
        yield from range(n)
        return "done"

    @server
    def frames(n: int):
        for i in range(n):
            yield np.full(2, i, np.float32)

    port = server.start().port
    code, out, _ = run("count", "n=3", "--stream", "-p", port, *transport)
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == [0, 1, 2, "done"]
    code, out, _ = run("frames", "n=2", "--stream", "--binary", "-p", port, *transport)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 2, out  # arrays as base64 .npy; a null result is not printed
    from ucall.client import Response

    assert [Response({"jsonrpc": "2.0", "id": 1, "result": line}).numpy.tolist() for line in lines] == [[0, 0], [1, 1]]
    code, _, err = run("count", "n=3", "-p", port, *transport)
    assert code == 2 and "streams its result" in err and "ucall count --stream" in err
    code, _, err = run("count", "n=3", "--stream", "--format", "numpy", "-p", port, *transport)
    assert code == 2 and "--stream writes JSON lines" in err


def test_options_anywhere(make_server):
    server = with_client_procedures(make_server())
    server.method("serve")(lambda: "the serve method")
    port = server.start().port
    for args in (
        ("-p", port, "sum", "a=1", "b=2"),
        ("--uri", "127.0.0.1", "-p", port, "--format", "json", "sum", "a=1", "b=2"),
        ("sum", "-p", port, "a=1", "--format", "json", "b=2"),
        ("sum", "a=1", "b=2", "-p", port),
        ("call", "-p", port, "sum", "a=1", "b=2"),
    ):
        code, out, err = run(*args)
        assert code == 0 and json.loads(out) in (3, {"jsonrpc": "2.0", "id": 1, "result": 3}), (args, err)
    for args in (("call", "serve", "-p", port), ("-p", port, "call", "serve"), ("--format", "json", "call", "serve")):
        code, out, err = run(*args, *(("-p", port) if "-p" not in args else ()), "--format", "json")
        assert code == 0 and json.loads(out) == "the serve method", (args, err)
    # `serve` after a call's options is the subcommand, which says what it does not take
    code, _, err = run("-p", port, "serve", "app:server")
    assert code == 2 and "No such option '-p'" in err, err
    # a dash and a digit make a value, typed ones too; "--" ends the options
    code, out, err = run("sum", "--positional", "-1", "-2:int", "-p", port, "--format", "json")
    assert code == 0 and out.strip() == "-3", err
    code, out, _ = run("echo", "--positional", "-p", port, "--format", "json", "--", "-x")
    assert code == 0 and json.loads(out) == "-x"
    code, out, _ = run("--version")
    assert code == 0 and __version__ in out
    code, out, _ = run("--help")
    assert code == 0 and "ucall serve MODULE:SERVER" in out and "call" in out
    code, out, _ = run("sum", "--help")
    assert code == 0 and "--format" in out and "--positional" in out


def test_unknown_options_are_named(port):
    for args in (("sum", "a=1", "--bogus", "-p", port), ("--bogus", "sum", "-p", port), ("sum", "--bogus=1")):
        code, _, err = run(*args)
        assert code == 2 and "No such option" in err and "--bogus" in err and "KEY=VALUE" not in err, (args, err)
    code, _, err = run("sum", "--formt", "json")
    assert code == 2 and "No such option" in err and "Did you mean" in err and "--format" in err, err


def test_output_file_for_every_format(port, tmp_path):
    out_file = tmp_path / "out"
    code, out, _ = run("sum", "a=1", "b=2", "--format", "json", "-o", out_file, "-p", port)
    assert code == 0 and out == "" and json.loads(out_file.read_text()) == 3
    code, out, err = run("fail", "-o", out_file, "-p", port)  # raw: the whole reply, an error too
    assert code == 1 and out == "" and "boom" in err and json.loads(out_file.read_text())["error"]["code"] == -32001
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    array_file = tmp_path / "a.npy"
    np.save(array_file, np.arange(4))
    code, out, _ = run("echo", f"data:bytes={array_file}", "--format", "numpy", "-o", out_file, "-p", port)
    assert code == 0 and out == "" and np.load(out_file).tolist() == [0, 1, 2, 3]  # the very path, no .npy added
    picture = tmp_path / "p.png"
    image.new("RGB", (5, 4), (9, 8, 7)).save(picture)
    for name, expected in (("copy.bmp", "BMP"), ("copy", "PNG")):  # by the extension, else as received
        code, out, err = run("echo", "-i", f"data={picture}", "--format", "image", "-o", tmp_path / name, "-p", port)
        assert code == 0 and out == "", err
        with image.open(tmp_path / name) as saved:
            assert (saved.format, saved.size) == (expected, (5, 4))


def test_files_images_and_rich_formats(port, tmp_path):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(3000))
    code, out, _ = run("size", "-f", f"data={blob}", "--format", "json", "-p", port)
    assert code == 0 and out.strip() == "3000"
    out_file = tmp_path / "copy.bin"
    code, _, _ = run("echo", "-f", f"data={blob}", "--format", "bytes", "-o", out_file, "-p", port)
    assert code == 0 and out_file.read_bytes() == blob.read_bytes()
    picture = tmp_path / "p.png"
    image.new("RGB", (5, 4), (9, 8, 7)).save(picture)
    # Piped (not a terminal), the image itself, as received: `> out.png` saves it.
    result = CliRunner().invoke(main, ["echo", "-i", f"data={picture}", "--format", "image", "-p", str(port)])
    assert result.exit_code == 0, result.stderr
    with image.open(io.BytesIO(result.stdout_bytes)) as shown:
        assert (shown.format, shown.size) == ("PNG", (5, 4))
    array_file = tmp_path / "a.npy"
    np.save(array_file, np.arange(4))
    code, out, _ = run("echo", f"data:bytes={array_file}", "--format", "numpy", "-p", port)
    assert code == 0 and "array([0, 1, 2, 3])" in out


@pytest.mark.parametrize("transport", ["http", "tcp", "ws"])
def test_files_and_arrays_go_as_attachments_where_the_server_takes_them(make_server, tmp_path, transport):
    np = pytest.importorskip("numpy")
    server = with_client_procedures(make_server())

    @server
    def total(x: np.ndarray) -> float:
        return float(x.sum())

    server.start()
    relay = Recorder(server.port)
    blob, array_file = tmp_path / "blob.bin", tmp_path / "x.npy"
    blob.write_bytes(os.urandom(5000))
    np.save(array_file, np.arange(12, dtype=np.float32).reshape(3, 4))
    uri = {"http": "http", "tcp": "tcp", "ws": "ws"}[transport] + f"://127.0.0.1:{relay.port}"
    kind = "websocket" if transport == "ws" else transport
    try:
        code, out, _ = run("size", "-f", f"data={blob}", "--format", "json", "--uri", uri)
        assert (code, out.strip()) == (0, "5000")
        assert relay.binary_messages(kind) == 1
        code, out, _ = run("total", f"x:numpy={array_file}", "--format", "json", "--uri", uri)
        assert (code, out.strip()) == (0, "66.0")
        assert relay.binary_messages(kind) == 2
        code, out, _ = run("size", "-f", f"data={blob}", "--format", "json", "--uri", uri, "--no-binary")
        assert (code, out.strip()) == (0, "5000")
        assert relay.binary_messages(kind) == 2
    finally:
        relay.close()


def test_method_help_says_how_to_send_attachments(make_server):
    np = pytest.importorskip("numpy")
    image = pytest.importorskip("PIL.Image")
    server = make_server()

    @server
    def upload(x: np.ndarray, data: bytes, picture: image.Image, label: str) -> int:
        return 0

    port = server.start().port
    code, out, err = run("upload", "--help", "-p", port)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "(required, sent as an attachment: x:numpy=FILE.npy)" in lines["x"], out
    assert "(required, sent as an attachment: -f data=FILE)" in lines["data"], out
    assert "(required, sent as an attachment: -i picture=FILE)" in lines["picture"], out
    assert "attachment" not in lines["label"], out


def test_python_dash_m(port):
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "sum", "a=2", "b=3", "--format", "json", "-p", str(port)],
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0 and result.stdout.strip() == "5"
    assert "\x1b[" not in result.stdout  # plain output in pipes


def test_serve_a_module(tmp_path, engine):
    (tmp_path / "app.py").write_text(textwrap.dedent("""
        from ucall import Server
        server = Server()

        @server
        def hello(name: str) -> str:
            return f"hello {name}"
    """))
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONPATH=str(REPO_ROOT / "python"))
    serve = ["-m", "ucall", "serve", "app:server", "--host", "127.0.0.1", "--port", "0", "--threads", "1"]
    with serving(serve, engine, cwd=tmp_path) as (proc, port):
        assert once(port, "hello", ["you"]) == "hello you"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    for target, expected in (("app:nothing", "module 'app' has no 'nothing'"), ("app:hello", "app:hello is a function")):
        result = subprocess.run(
            [sys.executable, "-m", "ucall", "serve", target], cwd=tmp_path, capture_output=True, text=True, env=env,
            timeout=30,
        )
        assert result.returncode == 2 and expected in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("module", "arguments", "expected"),
    [
        ("server = 1", ["--port", "-5"], "Invalid value for '--port' (env var: 'UCALL_PORT'): -5 is not in the range"),
        ("server = 1", ["--threads", "0"], "Invalid value for '--threads': 0 is not in the range x>=1."),
        ("def broken(:\n", [], "cannot import 'app': SyntaxError: invalid syntax (app.py, line 1)"),
        ("raise RuntimeError('no database')", [], "cannot import 'app': RuntimeError: no database"),
        ("from ucall import Server\nserver = Server(tls_port=0)", [], "cannot import 'app': ValueError: TLS needs"),
        ("server = 1", ["app:nothing"], "module 'app' has no 'nothing'"),
        (
            "from ucall import Server\nserver = Server()",
            ["--hsts-max-age", "60"],
            "Error: --hsts-max-age is said over TLS only: give --tls-cert and --tls-key",
        ),
    ],
)
def test_serve_refuses_what_it_cannot_run_as_a_usage_error(tmp_path, module, arguments, expected):
    (tmp_path / "app.py").write_text(module)
    target = [a for a in arguments if ":" in a] or ["app:server"]
    options = [a for a in arguments if ":" not in a]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "serve", *target, *options],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    # Exit 2, as for other usage errors (1 means the server answered an error), and no traceback.
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr, result.stderr
    if options:  # a bad option: click's usage, and one line says what is wrong
        assert [line for line in result.stderr.splitlines() if line.startswith("Error:")] == [
            line for line in result.stderr.splitlines() if expected in line
        ], result.stderr
    else:  # the command was right and MODULE:SERVER is not: that one line, no usage block
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ucall serve: {expected}"), result.stderr


def test_help_names_the_environment_variables():
    for command, shown in (
        (["--help"], ["UCALL_URI and UCALL_PORT give a call's --uri and -p", "UCALL_HOST and UCALL_PORT the --host"]),
        (["call", "--help"], ["env var: UCALL_URI", "env var: UCALL_PORT"]),
        (["serve", "--help"], ["env var: UCALL_HOST", "env var: UCALL_PORT"]),
    ):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())  # as wrapped for any terminal width
        for words in shown:
            assert words in text, (command, result.output)


def test_terminal_output_has_colour_and_an_upload_progress_bar(port, tmp_path):
    import pty

    blob = tmp_path / "big.bin"
    blob.write_bytes(os.urandom(6 << 20))
    main_fd, child_fd = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"), COLUMNS="80")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ucall", "size", "-f", f"data={blob}", "-p", str(port)],
        stdin=child_fd, stdout=child_fd, stderr=child_fd, env=env,
    )
    os.close(child_fd)
    output = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(main_fd)
    assert proc.wait(30) == 0
    text = output.decode("utf-8", "replace")
    assert "uploading" in text
    assert "\x1b[" in text and str(6 << 20) in text  # coloured JSON with the result


#: ``Server(...)`` options ``ucall serve`` has no flag for: what the module's code says
#: about its API (its description, CORS, debugging, validation), not how it is deployed.
LEFT_TO_CODE = {
    "ignore_extra_params", "debug", "quiet", "docs", "title", "version", "description", "openrpc_path",
    "openapi_path", "docs_path", "cors_origins", "cors_methods", "cors_headers", "cors_max_age", "metrics_registry",
}
#: Flags named as uvicorn names them rather than after the option.
RENAMED = {"request_log": "access_log", "request_log_format": "access_log_format"}


def test_serve_has_a_flag_for_each_deployment_option_of_server():
    options = set(inspect.signature(Server.__init__).parameters) - {"self"}
    flags = {param.name for param in serve.params}
    missing = {name for name in options - LEFT_TO_CODE if RENAMED.get(name, name) not in flags}
    assert not missing, f"Server options without a ucall serve flag: {sorted(missing)}"
    text = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    for flag in ("--max-pending-calls", "--metrics-buckets", "--uds", "--uds-mode", "--engine", "--tls-cert"):
        assert flag in text


def serve_app(tmp_path, *flags: str, engine: str = "poll"):
    (tmp_path / "app.py").write_text(textwrap.dedent("""
        import time
        from ucall import Server
        server = Server()

        @server
        def nap(seconds: float, started: str = "") -> float:
            if started:
                open(started, "w").close()  # tells the test the handler runs
            time.sleep(seconds)
            return seconds
    """))
    return serving(["-m", "ucall", "serve", "app:server", "--port", "0", *flags], engine, cwd=tmp_path)


def http_get(port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    finally:
        connection.close()


def test_serve_flags_reach_the_server(tmp_path, engine):
    flags = ["--metrics-buckets", "0.02,0.2", "--max-pending-calls", "1", "--engine", engine, "--healthz-path", "/live"]
    with serve_app(tmp_path, *flags, engine=engine) as (proc, port):
        status, page = http_get(port, "/metrics")
        assert status == 200 and 'le="0.02"' in page and 'le="0.005"' not in page, page[:600]
        assert http_get(port, "/live") == (200, "{\"status\":\"alive\"}")
        # While one call runs its handler, --max-pending-calls 1 refuses the next at once.
        started = tmp_path / "started"
        first = threading.Thread(target=once, args=(port, "nap", {"seconds": 1.0, "started": str(started)}))
        first.start()
        deadline = time.monotonic() + 10
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        [reply] = tcp_exchange(port, b'{"jsonrpc":"2.0","method":"nap","params":[0],"id":2}\n', 1)
        first.join(10)
        assert reply["error"]["code"] == -32000 and reply["error"]["data"]["executed"] is False, reply
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_serve_flags_go_to_the_workers(tmp_path):
    (tmp_path / "app.py").write_text("from ucall import Server\nserver = Server(threads=1)\nserver.route(lambda: 1, name='one')\n")
    args = ["-m", "ucall", "serve", "app:server", "--port", "0", "--workers", "1", "--metrics-buckets", "0.03"]
    with supervised(args, tmp_path) as s:
        page = http_get(s.port, "/metrics")[1]
        assert 'le="0.03"' in page and 'le="0.005"' not in page, page[:600]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--uds-mode", "600"], "--uds-mode needs --uds"),
        (["--healthz-path", "live"], "--healthz-path must start with '/'"),
        (["--metrics-buckets", "0.1,0.01"], "ascend"),
        (["--metrics-buckets", "fast"], "expected seconds separated by commas"),
        (["--uds-mode", "999"], "is not an octal mode"),
    ],
)
def test_serve_flags_refuse_bad_values(tmp_path, flags, expected):
    (tmp_path / "app.py").write_text("from ucall import Server\nserver = Server(port=0)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "python"))
    result = subprocess.run(
        [sys.executable, "-m", "ucall", "serve", "app:server", *flags],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=30,
    )
    assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize(("flags", "expected"), [([], True), (["--no-tracing"], False), (["--tracing"], True)])
def test_serve_tracing_flag_sets_the_servers_tracing(monkeypatch, flags, expected):
    import ucall.cli

    server = Server(port=0)
    seen = []
    monkeypatch.setattr(ucall.cli, "_load_server", lambda target: server)
    monkeypatch.setattr(server, "run", lambda **kwargs: seen.append(server.tracing))
    result = CliRunner().invoke(main, ["serve", "app:server", *flags])
    assert result.exit_code == 0, result.output
    assert seen == [expected]
