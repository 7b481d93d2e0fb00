# SPDX-License-Identifier: Apache-2.0
"""Every complete program shown in README.md and docs/*.md runs and does what it says.

A fenced block is a complete program when it is Rust or C with a `main`, or Python that
starts with an import and uses no name it does not define (ruff's F821). A listing of calls
that only makes sense against some other server is marked `<!-- fragment: why -->` on the
line before its fence, and is not run. Programs bind port 8545 in the text; the test gives
each a free port instead. A server is called (`sum(1, 2)` where it defines `sum`), then
stopped with SIGINT; a client runs against examples/python/sum_server.py and must print what
its `print(...)  # comment` lines promise.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO_ROOT, once, serving

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUFF = Path(sys.executable).with_name("ruff")
FENCE = re.compile(r"^```(\w+)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    fragment: bool  # marked as not a program

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}:{self.lang}"


def blocks() -> list[Block]:
    found = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if m:
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                fragment = i > 0 and lines[i - 1].startswith("<!-- fragment:")
                found.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", fragment))
                i = end
            i += 1
    return found


def undefined_names(code: str) -> bool:
    result = subprocess.run(
        [str(RUFF), "check", "--select", "F821", "--output-format", "concise", "--stdin-filename", "block.py", "-"],
        input=code,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode != 0


def is_program(block: Block) -> bool:
    if block.fragment:
        return False
    if block.lang == "rust":
        return re.search(r"\bfn main\(", block.text) is not None
    if block.lang == "c":
        return re.search(r"\bint main\(", block.text) is not None
    if block.lang == "python":
        return re.match(r"(from|import) ", block.text.lstrip()) is not None and not undefined_names(block.text)
    return False


PROGRAMS = [b for b in blocks() if is_program(b)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_accepting(proc: subprocess.Popen, port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port} after {seconds} s")


def promised(text: str) -> list[str]:
    """What the `print(...)  # shown` lines promise to print."""
    return [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s*#\s*(.+)$", text, re.M)]


def runs_as_promised(script: Path, block: Block, env: dict) -> None:
    """Run the Python `script` to its end: it exits 0, having printed what `block`'s
    `print(...)  # shown` lines promise."""
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    for fragment in promised(block.text):
        assert fragment in result.stdout, (fragment, result.stdout)


def serve_and_stop(cmd: list[str], block: Block, port: int, env: dict, stop_exits_cleanly: bool) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_accepting(proc, port, 30)
        if re.search(r'\bdef sum\b|"sum"', block.text):
            assert once(port, "sum", {"a": 1, "b": 2}) == 3  # by name: every example takes names
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
        if stop_exits_cleanly:
            assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_docs_show_a_program_in_each_language() -> None:
    readme = {b.lang for b in PROGRAMS if b.path.name == "README.md"}
    assert {"python", "rust", "c"} <= readme, [b.id for b in PROGRAMS]


def test_fragments_say_why() -> None:
    for path in DOCS:
        for line in path.read_text().splitlines():
            if line.startswith("<!-- fragment"):
                assert re.match(r"<!-- fragment: \S.* -->$", line), (path, line)


@pytest.mark.timeout(900)  # the first Rust or C program builds ucall-core or libucall (debug)
@pytest.mark.parametrize("block", PROGRAMS, ids=lambda b: b.id)
def test_program(block: Block, engine: str, tmp_path: Path) -> None:
    port = free_port()
    code = block.text.replace("8545", str(port))
    env = dict(os.environ, UCALL_ENGINE=engine, PYTHONUNBUFFERED="1")
    if block.lang == "python" and "Server(" in code and "with server" in code:
        # Starts its own server on a free port, checks what it shows and exits: run it whole.
        (tmp_path / "script.py").write_text(code)
        runs_as_promised(tmp_path / "script.py", block, env)
    elif block.lang == "python" and "Server(" in code:
        (tmp_path / "server.py").write_text(code)
        serve_and_stop([sys.executable, str(tmp_path / "server.py")], block, port, env, stop_exits_cleanly=True)
    elif block.lang == "python":
        example = REPO_ROOT / "examples" / "python"
        with serving([str(example / "sum_server.py"), "--port", "0"], engine, cwd=example) as (_, port):
            code = block.text.replace("8545", str(port))
            (tmp_path / "client.py").write_text(code)
            runs_as_promised(tmp_path / "client.py", block, env)
    elif block.lang == "rust":
        binary = build_rust(code, tmp_path)
        serve_and_stop([str(binary)], block, port, env, stop_exits_cleanly=True)
    elif block.lang == "c":
        binary = build_c(code, tmp_path)
        # A C program that installs no signal handler ends by the signal: that is what it says.
        serve_and_stop([str(binary)], block, port, env, stop_exits_cleanly="sigaction" in code)
    else:
        raise AssertionError(f"no runner for {block.id}")


def cargo(*args: str) -> None:
    subprocess.run(["cargo", *args], cwd=REPO_ROOT, check=True, capture_output=True, timeout=900)


def build_rust(code: str, tmp_path: Path) -> Path:
    """rustc on the block alone, against the workspace's ucall-core (debug) and its deps."""
    cargo("build", "-p", "ucall-core")
    debug = REPO_ROOT / "target" / "debug"
    source, binary = tmp_path / "main.rs", tmp_path / "program"
    source.write_text(code)
    cmd = ["rustc", "--edition", "2021", "--crate-type", "bin", str(source), "-o", str(binary)]
    cmd += ["--extern", f"ucall_core={debug / 'libucall_core.rlib'}", "-L", f"dependency={debug / 'deps'}"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return binary


def build_c(code: str, tmp_path: Path) -> Path:
    cargo("build", "-p", "ucall-capi")
    source, binary = tmp_path / "program.c", tmp_path / "program"
    source.write_text(code)
    library = REPO_ROOT / "target" / "debug" / "libucall.a"
    cmd = ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(REPO_ROOT / "include"), str(source)]
    cmd += [str(library), "-lpthread", "-ldl", "-lm", "-lrt", "-o", str(binary)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return binary
