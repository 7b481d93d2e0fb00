# SPDX-License-Identifier: Apache-2.0
"""The servers measured: how to start each one for each protocol, what it needs built or installed."""

from __future__ import annotations

from dataclasses import dataclass

from ucallbench.config import BENCH_DIR, PEERS_PY, ROOT, UCALL054_NO_LISTS, UCALL054_PY

# ---------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Endpoint:
    """How to start a server for one protocol."""

    argv: tuple[str, ...]  # relative paths are taken from the repository root
    # A reply lacking this counts as an error; None derives it from the workload's expected result.
    expect: str | None = None
    # How calls are put on the wire: "jsonrpc" (JSON-RPC 2.0 POSTed to /, or one per line over
    # raw TCP), "rest" (POST /METHOD with the params object as the body, the bare result back),
    # or "grpc" (benches/peers/bench.proto over HTTP/2, measured by ucall-load-grpc).
    dialect: str = "jsonrpc"
    path: str | None = None  # the HTTP target (the WebSocket's, for "ws"); None: the workload's


# A self-signed certificate for 127.0.0.1, made by make_certificate() for each run.
TLS_DIR = BENCH_DIR / "tls"
TLS_ARGS = ("--tls-cert", "target/bench/tls/cert.pem", "--tls-key", "target/bench/tls/key.pem")

# Every procedure of examples/rust/src/bin/bench_server.rs and benches/peers/procs.py.
ALL_METHODS = frozenset({"sum", "echo", "fibonacci", "hash_complex", "std_dev", "average_container", "gen_rand_ints"})


@dataclass(frozen=True)
class Server:
    name: str
    description: str
    endpoints: dict[str, Endpoint]  # protocol ("http" or "tcp") -> endpoint
    # cargo packages ("cargo:NAME"), C sources ("c:FILE"), or C sources on libucall ("capi:FILE")
    build: tuple[str, ...] = ()
    reference: bool = False  # ratio columns divide by this server's figures
    default: bool = True  # run when --servers is not given
    peer: bool = False  # a server users would pick instead of UCall; neither peer nor reference is UCall
    methods: frozenset[str] = frozenset({"sum"})  # procedures it has; workloads calling others skip it
    # Its entry in target/bench/peers/status.json (benches/setup_peers.sh); not "ok" means not run.
    needs: str | None = None
    # (procedure or protocol, reason): workloads calling it, or over it, show the reason
    # instead of a figure.
    unsupported: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return "reference" if self.reference else "peer" if self.peer else "ucall"


# Built from its own Cargo project and lock file into the same target directory.
JSONRPSEE = ("target/release/jsonrpsee-peer", "--host", "127.0.0.1", "--port", "0")


def c_example_has_tls() -> bool:
    """Whether examples/c/sum.c takes the TLS options the other servers take."""
    try:
        text = (ROOT / "examples" / "c" / "sum.c").read_text()
    except OSError:
        return False
    return all(f'"{flag}"' in text for flag in TLS_ARGS[::2])


C_NO_TLS = "unsupported: examples/c/sum.c has no TLS options yet"
C_UNSUPPORTED = () if c_example_has_tls() else (("https", C_NO_TLS),)


@dataclass(frozen=True)
class UcallApi:
    """One of UCall's front ends as a bench server: the program that serves it, what it answers."""

    what: str  # the description, less the threads and the engine
    program: tuple[str, ...]  # argv before the options every UCall bench server takes
    build: tuple[str, ...] = ()
    methods: frozenset[str] = ALL_METHODS
    unsupported: tuple[tuple[str, str], ...] = ()


# bench_server answers sum and echo as sum_server does, plus the rpc.hpp procedures.
RUST_API = UcallApi(
    "UCall Rust API, examples/rust bench_server", ("target/release/bench_server",), build=("cargo:ucall-examples",)
)
C_API = UcallApi(
    "UCall C API, examples/c/sum.c (sum, echo) on the release libucall.a",
    ("target/bench/sum",),
    build=("capi:examples/c/sum.c",),
    methods=frozenset({"sum", "echo"}),
    unsupported=C_UNSUPPORTED,
)
# Every procedure of bench_server, on the Python API. Needs the package built into .venv
# (make python; make bench does it).
PYTHON_API = UcallApi(
    "UCall Python API, benches/ucall_python_app.py (typed procedures, echo of bytes)",
    (".venv/bin/python", "benches/ucall_python_app.py"),
)


def ucall_server(name: str, api: UcallApi, engine: str) -> Server:
    """A UCall server, one thread on `engine` ("poll" or "uring")."""
    argv = (*api.program, "--host", "127.0.0.1", "--port", "0", "--threads", "1", "--engine", engine)
    # One port serves all three: a connection whose first byte is `{` or `[` is raw TCP.
    endpoints = {protocol: Endpoint(argv) for protocol in ("http", "tcp", "ws")}
    endpoints["https"] = Endpoint((*argv, *TLS_ARGS))
    return Server(
        name=name,
        description=f"{api.what}, 1 thread, {engine} engine",
        endpoints=endpoints,
        build=api.build,
        methods=api.methods,
        unsupported=api.unsupported,
    )


SERVERS: list[Server] = [
    Server(
        name="c-reference",
        description="C, one thread, epoll; fixed reply per HTTP request (epoll_http.c), echo over raw TCP (epoll_echo.c)",
        endpoints={
            "http": Endpoint(("target/bench/epoll_http", "0")),
            # The echo server returns the request line itself, which has no result.
            "tcp": Endpoint(("target/bench/epoll_echo", "0"), expect='"method":"sum"'),
        },
        build=("c:benches/reference/epoll_http.c", "c:benches/reference/epoll_echo.c"),
        reference=True,
    ),
    ucall_server("ucall-rust-poll", RUST_API, "poll"),
    ucall_server("ucall-rust-uring", RUST_API, "uring"),
    ucall_server("ucall-c-poll", C_API, "poll"),
    ucall_server("ucall-python", PYTHON_API, "poll"),
    ucall_server("ucall-c-uring", C_API, "uring"),
    ucall_server("ucall-python-uring", PYTHON_API, "uring"),
    # ---- peers: installed by benches/setup_peers.sh into benches/.venv-peers and .venv-ucall054
    Server(
        name="fastapi-rest",
        description="FastAPI on uvicorn (uvloop, httptools), 1 process, async REST endpoints (POST /sum with {a, b})",
        endpoints={
            "http": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py"), dialect="rest"),
            "https": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py", *TLS_ARGS), dialect="rest"),
        },
        peer=True,
        methods=ALL_METHODS,
        needs="fastapi",
    ),
    Server(
        name="fastapi-ws",
        description="FastAPI on uvicorn (uvloop, websockets), 1 process, JSON-RPC in WebSocket text frames at /ws",
        endpoints={"ws": Endpoint((PEERS_PY, "benches/peers/fastapi_app.py"), path="/ws")},
        peer=True,
        methods=ALL_METHODS,
        needs="fastapi",
    ),
    Server(
        name="granian",
        description="granian RSGI, 1 worker, 1 runtime thread, JSON-RPC dispatcher of benches/peers/procs.py",
        endpoints={"http": Endpoint((PEERS_PY, "benches/peers/granian_app.py"))},
        peer=True,
        methods=ALL_METHODS,
        needs="granian",
    ),
    Server(
        name="socketify",
        description="socketify (uWebSockets), 1 process, JSON-RPC dispatcher of benches/peers/procs.py",
        endpoints={"http": Endpoint((PEERS_PY, "benches/peers/socketify_app.py"))},
        peer=True,
        methods=ALL_METHODS,
        needs="socketify",
    ),
    Server(
        name="jsonrpsee",
        description="jsonrpsee 0.26 (the Rust JSON-RPC 2.0 server library), HTTP and WebSocket on one port, "
        "1 tokio thread (current-thread runtime), benches/peers/jsonrpsee",
        # One port serves both, as UCall's does.
        endpoints={"http": Endpoint(JSONRPSEE), "ws": Endpoint(JSONRPSEE)},
        build=("manifest:benches/peers/jsonrpsee/Cargo.toml",),
        peer=True,
        methods=ALL_METHODS,
    ),
    Server(
        name="grpcio-sync",
        description="grpcio, sync server with a thread pool of 4, benches/peers/bench.proto",
        endpoints={
            "http": Endpoint((PEERS_PY, "benches/peers/grpc_app.py", "sync", "target/bench/peers"), dialect="grpc")
        },
        peer=True,
        methods=ALL_METHODS,
        needs="grpcio",
    ),
    Server(
        name="grpcio-asyncio",
        description="grpcio, grpc.aio server, benches/peers/bench.proto",
        endpoints={
            "http": Endpoint((PEERS_PY, "benches/peers/grpc_app.py", "asyncio", "target/bench/peers"), dialect="grpc")
        },
        peer=True,
        methods=ALL_METHODS,
        needs="grpcio",
    ),
    Server(
        name="ucall054-posix",
        description="ucall 0.5.4 from PyPI (prior art), posix engine, 1 thread; it closes the connection after "
        "each reply without saying so, which loses the request sent meanwhile (counted as errors)",
        endpoints={"http": Endpoint((UCALL054_PY, "benches/peers/ucall054_app.py", "posix"))},
        peer=True,
        methods=ALL_METHODS,
        needs="ucall054",
        unsupported=tuple((m, UCALL054_NO_LISTS) for m in ("hash_complex", "std_dev", "average_container")),
    ),
    Server(
        name="ucall054-uring",
        description="ucall 0.5.4 from PyPI (prior art), io_uring engine, 1 thread",
        endpoints={"http": Endpoint((UCALL054_PY, "benches/peers/ucall054_app.py", "uring"))},
        peer=True,
        methods=ALL_METHODS,
        needs="ucall054",
        unsupported=tuple((m, UCALL054_NO_LISTS) for m in ("hash_complex", "std_dev", "average_container")),
    ),
]
