# SPDX-License-Identifier: Apache-2.0
"""The scale-out recipe (deploy/, docs/deploy.md): the configurations pass their tools'
own checks, the Kubernetes manifests parse and hold the fields the recipe relies on, and
HAProxy and nginx, run with the configurations as they are, pass HTTP, raw TCP and
WebSocket calls to UCall servers and take a draining server out."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import REPO_ROOT, Wire

sys.path.insert(0, str(REPO_ROOT / "tests" / "scale"))
import scale_test  # noqa: E402

from ucall import Server  # noqa: E402

DOCS = REPO_ROOT / "docs" / "deploy.md"
needs = {tool: pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool}: make setup installs it") for tool in ("haproxy", "nginx")}


def haproxy_env(tmp_path: Path, ports: list[int]) -> dict[str, str]:
    env = dict(os.environ, HAPROXY_SOCKET=str(tmp_path / "admin.sock"), UCALL_CHECK_INTER="100ms")
    env.update(UCALL_HTTP_BIND=f"127.0.0.1:{scale_test.free_port()}", UCALL_TCP_BIND=f"127.0.0.1:{scale_test.free_port()}")
    for i, port in enumerate(ports, 1):
        env[f"UCALL_BACKEND_{i}"] = f"127.0.0.1:{port}"
    return env


@needs["haproxy"]
def test_haproxy_config_is_valid(tmp_path):
    check = subprocess.run(
        ["haproxy", "-c", "-f", str(REPO_ROOT / "deploy" / "haproxy.cfg")],
        env=haproxy_env(tmp_path, [18001, 18002, 18003]), capture_output=True, text=True, timeout=30,
    )
    assert check.returncode == 0 and "Configuration file is valid" in check.stdout, check.stdout + check.stderr


@needs["nginx"]
def test_nginx_config_is_valid(tmp_path):
    balancer = scale_test.Nginx([], tmp_path)
    balancer.backends = [type("B", (), {"name": f"b{i}", "host": "127.0.0.1", "port": 18000 + i})() for i in (1, 2, 3)]  # type: ignore[misc]
    balancer.render()
    text = "\n".join(line for line in (balancer.work / "nginx.conf").read_text().splitlines() if not line.startswith("#"))
    assert "${UCALL" not in text and "$http_upgrade" in text  # ours filled in, nginx's own left
    check = subprocess.run(
        ["nginx", "-t", "-p", str(balancer.work), "-c", str(balancer.work / "nginx.conf")],
        capture_output=True, text=True, timeout=30,
    )
    assert check.returncode == 0 and "test is successful" in check.stderr, check.stderr


def manifests() -> list[dict[str, Any]]:
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert blocks, "docs/deploy.md has no yaml block"
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc is not None]


def dig(document: dict[str, Any], path: str, kind: type) -> Any:
    """``document``'s value at a dotted ``path`` (``[0]`` indexes a list), of type ``kind``."""
    value: Any = document
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            assert isinstance(value, list), (path, value)
            value = value[int(part[1:-1])]
        else:
            assert isinstance(value, dict) and part in value, f"{path}: {part} missing"
            value = value[part]
    assert isinstance(value, kind), f"{path}: {value!r} is not a {kind.__name__}"
    return value


def test_kubernetes_manifests_hold_what_the_recipe_needs():
    documents = {doc["kind"]: doc for doc in manifests()}
    assert set(documents) == {"Deployment", "Service"}
    deployment = documents["Deployment"]
    assert deployment["apiVersion"] == "apps/v1"
    labels = dig(deployment, "spec.selector.matchLabels", dict)
    assert dig(deployment, "spec.template.metadata.labels", dict) == labels
    pod = dig(deployment, "spec.template.spec", dict)
    container = dig(pod, "containers[0]", dict)
    args = dig(container, "args", list)
    assert args[:3] == ["ucall", "serve", "app:server"] and "--drain-delay" in args
    drain = float(args[args.index("--drain-delay") + 1])
    port = dig(container, "ports[0].containerPort", int)
    assert args[args.index("--port") + 1] == str(port)
    port_name = dig(container, "ports[0].name", str)
    assert dig(container, "readinessProbe.httpGet.path", str) == "/readyz"
    assert dig(container, "readinessProbe.httpGet.port", str) == port_name
    # Liveness must not fail while the pod drains: /healthz passes while the process answers.
    assert dig(container, "livenessProbe.httpGet.path", str) == "/healthz"
    assert dig(container, "livenessProbe.httpGet.port", str) == port_name
    pre_stop = dig(container, "lifecycle.preStop.exec.command", list)
    assert pre_stop[0] == "sleep"
    shutdown_timeout = 5  # the server's default
    grace = dig(pod, "terminationGracePeriodSeconds", int)
    assert grace > float(pre_stop[1]) + drain + shutdown_timeout, "the grace period must cover preStop, drain and shutdown"
    service = documents["Service"]
    assert service["apiVersion"] == "v1" and dig(service, "spec.selector", dict) == labels
    assert dig(service, "spec.ports[0].targetPort", str) == port_name


def test_dockerfile_names_what_exists():
    dockerfile = (REPO_ROOT / "deploy" / "Dockerfile").read_text()
    known = {"FROM", "RUN", "COPY", "WORKDIR", "ARG", "USER", "EXPOSE", "STOPSIGNAL", "HEALTHCHECK", "CMD", "ENV"}
    lines = [line for line in dockerfile.splitlines() if line.strip() and not line.startswith("#")]
    assert {line.split()[0] for line in lines} <= known
    app = re.search(r"ARG APP=(\S+)", dockerfile)
    assert app and (REPO_ROOT / app.group(1)).is_file()
    cmd = json.loads(re.search(r"^CMD (.*)$", dockerfile, flags=re.M).group(1))  # type: ignore[union-attr]
    assert cmd[:3] == ["ucall", "serve", "app:server"] and "--drain-delay" in cmd
    assert "/healthz" in dockerfile and "STOPSIGNAL SIGTERM" in dockerfile


# ---------------------------------------------------------------- live, on loopback


@contextlib.contextmanager
def backends(count: int = 3, **options: Any) -> Iterator[list[Server]]:
    servers = []
    try:
        for i in range(count):
            server = Server(port=0, engine="poll", quiet=True, **options)
            server.method("who")(lambda i=i: i)
            servers.append(server.start())
        yield servers
    finally:
        for server in servers:
            server.stop()


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str] | None, port: int) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stderr:
            proc.stderr.close()


def every_transport(http_port: int, tcp_port: int) -> None:
    """One call over HTTP keep-alive, raw TCP and WebSocket through the balancer."""
    from websockets.sync.client import connect

    deadline = time.monotonic() + 10
    while True:  # the first health checks may not have passed yet
        with contextlib.suppress(OSError, AssertionError):
            wire = Wire(http_port)
            try:
                assert wire.result("who") in (0, 1, 2) and wire.result("who") in (0, 1, 2)
            finally:
                wire.close()
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with socket.create_connection(("127.0.0.1", tcp_port), timeout=10) as sock:
        sock.sendall(b'{"jsonrpc":"2.0","method":"who","id":7}\n')
        assert json.loads(sock.makefile("rb").readline())["result"] in (0, 1, 2)
    with connect(f"ws://127.0.0.1:{http_port}/", open_timeout=10) as ws:
        ws.send('{"jsonrpc":"2.0","method":"who","id":8}')
        assert json.loads(ws.recv(timeout=10))["result"] in (0, 1, 2)


@needs["haproxy"]
def test_haproxy_passes_every_transport_and_takes_a_draining_server_out(tmp_path):
    with backends() as servers:
        env = haproxy_env(tmp_path, [s.port for s in servers])
        http_port = int(env["UCALL_HTTP_BIND"].rsplit(":", 1)[1])
        tcp_port = int(env["UCALL_TCP_BIND"].rsplit(":", 1)[1])
        command = ["haproxy", "-W", "-db", "-f", str(REPO_ROOT / "deploy" / "haproxy.cfg")]
        with running(command, env, http_port):
            every_transport(http_port, tcp_port)
            servers[0]._draining = True  # as during drain_delay after SIGTERM
            balancer = scale_test.HAProxy.__new__(scale_test.HAProxy)
            balancer.work = tmp_path
            deadline = time.monotonic() + 10
            while not balancer.states().get("s1", "").startswith("DOWN"):
                assert time.monotonic() < deadline, balancer.states()
                time.sleep(0.05)
            assert {once_via(http_port) for _ in range(12)} == {1, 2}


def once_via(port: int) -> int:
    wire = Wire(port)
    try:
        return int(wire.result("who"))
    finally:
        wire.close()


@needs["nginx"]
def test_nginx_passes_every_transport(tmp_path):
    with backends() as servers:
        balancer = scale_test.Nginx([], tmp_path)
        balancer.backends = [type("B", (), {"name": f"b{i}", "host": "127.0.0.1", "port": s.port})() for i, s in enumerate(servers)]  # type: ignore[misc]
        balancer.render()
        command = ["nginx", "-p", str(balancer.work), "-c", str(balancer.work / "nginx.conf"), "-g", "daemon off;"]
        with running(command, None, balancer.http_port):
            every_transport(balancer.http_port, balancer.tcp_port)
