# SPDX-License-Identifier: Apache-2.0
"""Worker processes: one server served by N processes on one port.

Python runs one handler at a time per process (the GIL), so a server that computes in
Python scales over cores with processes, as gunicorn and ``uvicorn --workers`` do. Each
worker binds its own listeners on the shared port (``SO_REUSEPORT``) and the kernel
spreads new connections between them. The supervisor serves nothing itself:

- it keeps the port reserved (a socket bound with ``SO_REUSEPORT`` that never listens,
  so it takes no connection), so that a port picked by the kernel (``port=0``) stays the
  server's across restarts;
- it starts a worker again when one dies (after a pause that grows while they keep dying
  at start-up);
- ``SIGHUP`` restarts the workers one at a time: a new worker first, and the old one is
  told to stop only once the new one serves (so the port never has fewer workers);
- ``SIGTERM`` or ``SIGINT`` stops them all gracefully (each drains, see
  ``Server.drain_delay``), killing what is left after a deadline;
- with ``reload``, a change to a watched source file restarts the workers as ``SIGHUP``
  does (for development).

A worker tells the supervisor it serves by writing the name of its engine to a pipe once
its listeners are open and its workers run (the supervisor's start-up line says it); it
stops by itself when the supervisor is gone.

Each worker counts its own metrics, and the kernel hands a scrape of the shared port to
any one of them. With ``metrics`` the supervisor serves their totals on a port of its
own: every worker answers its page on a Unix socket of the supervisor's (``METRICS_DIR``
names the folder), and a scrape of the supervisor adds them up.
"""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable

__all__ = ["METRICS_DIR", "Supervisor", "add_pages", "reserve_port", "serve_worker_metrics", "source_files"]

#: How long a new worker may take to serve before a restart gives up on it.
READY_TIMEOUT = 30.0
#: A worker that dies sooner than this after its start counts as a failed start.
FAILED_START = 1.0
#: The pause before starting again a worker whose starts keep failing (it doubles up to this).
MAX_BACKOFF = 10.0
#: How often the supervisor looks at its workers and, with ``reload``, at the sources.
TICK = 0.1
RELOAD_POLL = 0.5
#: The environment variable naming the folder where each worker answers its metrics page
#: on the Unix socket ``<pid>.sock``; set by the supervisor for its workers.
METRICS_DIR = "UCALL_WORKER_METRICS_DIR"
#: How long the supervisor waits for one worker's page.
PAGE_TIMEOUT = 2.0
#: The ``Content-Type`` of the Prometheus text format.
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def _log(message: str) -> None:
    print(f"ucall: {message}", file=sys.stderr, flush=True)


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT`` that never listens: workers
    bind the same port beside it, and it takes no connections itself. A port in use by
    another server is refused first (a plain bind tells), as the core does for a server."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if port != 0:
        probe = socket.socket(family, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise OSError(error.errno, f"cannot bind {host}:{port}: another server listens on that port") from None
            raise
        finally:
            probe.close()
    reserved = socket.socket(family, socket.SOCK_STREAM)
    try:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            reserved.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        reserved.bind((host, port))
    except BaseException:
        reserved.close()
        raise
    return reserved


def source_files(roots: Iterable[str]) -> dict[str, float]:
    """The ``.py`` files under ``roots`` with their modification times (``reload``)."""
    found: dict[str, float] = {}
    for root in roots:
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    try:
                        found[path] = os.stat(path).st_mtime
                    except OSError:  # removed while walking
                        pass
    return found


def serve_worker_metrics(render: Callable[[], "str | None"], path: str) -> None:
    """Answer every connection to the Unix socket ``path`` with ``render()`` (this
    worker's metrics page), from a daemon thread."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall((render() or "").encode("utf-8"))
                except OSError:  # the supervisor gave up on this page
                    pass

    threading.Thread(target=answer, name="ucall-worker-metrics", daemon=True).start()


def _worker_page(path: str) -> str:
    """The page a worker answers on its Unix socket ``path`` (empty when it cannot)."""
    chunks = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(PAGE_TIMEOUT)
            conn.connect(path)
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:  # a worker starting or stopping: its counts are missing from this scrape
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


def add_pages(pages: Iterable[str]) -> str:
    """The totals of metrics pages in the Prometheus text format: each series (a sample
    line's name and labels) summed over the pages, families and series in the order they
    first appear. Counters, histograms and gauges of counts (calls in flight, connections
    open) add up so; ``ucall_engine_info`` becomes the number of workers."""
    families: dict[str, tuple[list[str], dict[str, float]]] = {}
    for page in pages:
        current: dict[str, float] | None = None
        for line in page.splitlines():
            if line.startswith("# HELP "):
                name = line.split(" ", 3)[2]
                header, current = families.setdefault(name, ([], {}))
                if not header:
                    header.append(line)
            elif line.startswith("# TYPE "):
                name = line.split(" ", 3)[2]
                header, current = families.setdefault(name, ([], {}))
                if len(header) < 2:
                    header.append(line)
            elif line and not line.startswith("#") and current is not None:
                series, _, value = line.rpartition(" ")
                try:
                    current[series] = current.get(series, 0.0) + float(value)
                except ValueError:
                    continue
    out = []
    for header, samples in families.values():
        out.extend(header)
        out.extend(f"{series} {_number(value)}" for series, value in samples.items())
    return "\n".join(out) + "\n" if out else ""


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


class _Exporter:
    """The supervisor's metrics port: ``GET /metrics`` answers the workers' totals."""

    def __init__(self, address: tuple[str, int], pages: Callable[[], list[str]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = add_pages(pages()).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", TEXT_FORMAT)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
                pass

        self.http = ThreadingHTTPServer(address, Handler)
        self.http.daemon_threads = True
        self.port = self.http.server_address[1]
        self.thread = threading.Thread(target=self.http.serve_forever, name="ucall-metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


class _Worker:
    __slots__ = ("engine", "pid", "ready", "serving", "started")

    def __init__(self, pid: int, ready: int) -> None:
        self.pid = pid
        self.ready = ready  # the read end of the worker's readiness pipe; -1 once read
        self.serving = False
        self.engine = ""  # what the worker wrote once serving: the engine it serves with
        self.started = time.monotonic()


class Supervisor:
    """Runs ``workers`` processes made by ``start_worker(ready_fd)`` until told to stop.

    ``start_worker`` runs in the forked child; it serves, writes its engine's name (at
    least one byte) to ``ready_fd`` once serving, and returns the exit status (or exec()s a program that does so)."""

    def __init__(
        self,
        start_worker: Callable[[int], int],
        workers: int,
        *,
        stop_timeout: float,
        reload_roots: list[str] | None = None,
        ready_timeout: float = READY_TIMEOUT,
        metrics: tuple[str, int] | None = None,
    ) -> None:
        """``metrics``: the (host, port) where the supervisor serves the workers' totals
        (port 0 picks one: ``metrics_port`` once running)."""
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.start_worker = start_worker
        self.count = workers
        self.stop_timeout = stop_timeout
        self.reload_roots = reload_roots
        self.ready_timeout = ready_timeout
        self.workers: dict[int, _Worker] = {}
        self._signals: list[int] = []
        self._stopping: set[int] = set()  # told to stop: their exit is no failure
        self._failures = 0
        self._next_start = 0.0
        self.metrics = metrics
        self.metrics_port: int | None = None
        self.engine = ""
        self._metrics_dir: str | None = None

    # ------------------------------------------------------------ processes

    def _spawn(self) -> _Worker:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            status = 1
            try:
                os.close(read)
                for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(number, signal.SIG_DFL)
                status = self.start_worker(write)
            except BaseException:  # noqa: BLE001 - reported, then the child must not return to the caller's code
                import traceback

                traceback.print_exc()
            finally:
                os._exit(status)
        os.close(write)
        worker = _Worker(pid, read)
        self.workers[pid] = worker
        return worker

    def _read_ready(self, worker: _Worker, timeout: float) -> bool:
        """Wait up to ``timeout`` for ``worker``'s readiness byte (False at EOF: it died)."""
        if worker.serving or worker.ready < 0:
            return worker.serving
        readable, _, _ = select.select([worker.ready], [], [], max(timeout, 0))
        if not readable:
            return False
        got = os.read(worker.ready, 64)
        os.close(worker.ready)
        worker.ready = -1
        worker.serving = bool(got)
        worker.engine = got.decode("ascii", "replace")
        return worker.serving

    def _reap(self) -> None:
        """Forget the workers that exited since the last look, logging those that were not
        told to stop; the main loop starts others until there are ``count`` again."""
        # Each worker by its pid: waitpid(-1) would also reap children that the program
        # running run(workers=N) started itself.
        for pid in list(self.workers):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == 0:
                continue
            worker = self.workers.pop(pid)
            if self._metrics_dir is not None:
                try:
                    os.unlink(os.path.join(self._metrics_dir, f"{pid}.sock"))
                except OSError:  # it died before answering metrics
                    pass
            if worker.ready >= 0:
                os.close(worker.ready)
                worker.ready = -1
            if pid not in self._stopping:
                self._died(worker, status)
            self._stopping.discard(pid)

    def _wait_gone(self, pids: set[int], deadline: float) -> None:
        """Reap until ``pids`` have exited or ``deadline`` passed; then kill the rest."""
        self._stopping |= pids
        while pids & self.workers.keys() and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.02)
        for pid in pids & self.workers.keys():
            _log(f"worker {pid} did not stop within {self.stop_timeout:g} s: killed")
            _signal(pid, signal.SIGKILL)
        while pids & self.workers.keys():
            self._reap()
            time.sleep(0.02)

    # ------------------------------------------------------------ the loop

    def _on_signal(self, number: int, _frame: object) -> None:
        self._signals.append(number)

    def _told_to_stop(self) -> bool:
        return signal.SIGTERM in self._signals or signal.SIGINT in self._signals

    def run(self, ready: Callable[[list[int]], None] | None = None) -> int:
        """Serve until SIGTERM or SIGINT; returns the exit status (0 once stopped cleanly).
        ``ready(pids)`` is called once every first worker serves (``engine`` then says
        which engine they serve with)."""
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {number: signal.signal(number, self._on_signal) for number in handled}
        exporter = None
        try:
            if self.metrics is not None:
                # Before the first fork: every worker inherits where to answer.
                self._metrics_dir = tempfile.mkdtemp(prefix="ucall-metrics-")
                os.environ[METRICS_DIR] = self._metrics_dir
                exporter = _Exporter(self.metrics, self._pages)
                self.metrics_port = exporter.port
            return self._serve(ready)
        finally:
            for worker in list(self.workers.values()):
                _signal(worker.pid, signal.SIGKILL)
            self._wait_gone(set(self.workers), time.monotonic())
            for number, handler in previous.items():
                signal.signal(number, handler)
            if exporter is not None:
                exporter.close()
            if self._metrics_dir is not None:
                os.environ.pop(METRICS_DIR, None)
                shutil.rmtree(self._metrics_dir, ignore_errors=True)

    def _pages(self) -> list[str]:
        """The metrics page of every worker that serves (from the exporter's threads)."""
        folder = self._metrics_dir
        if folder is None:
            return []
        serving = [w.pid for w in list(self.workers.values()) if w.serving]
        return [_worker_page(os.path.join(folder, f"{pid}.sock")) for pid in serving]

    def _serve(self, ready: Callable[[list[int]], None] | None) -> int:
        first = [self._spawn() for _ in range(self.count)]
        deadline = time.monotonic() + self.ready_timeout
        for worker in first:
            if not self._read_ready(worker, deadline - time.monotonic()):
                _log(f"worker {worker.pid} did not start serving")
                self._stop_all()
                return 1
        self.engine = first[0].engine if first else ""
        if ready is not None:
            ready([w.pid for w in first])
        sources = source_files(self.reload_roots) if self.reload_roots else {}
        next_look = time.monotonic() + RELOAD_POLL
        while True:
            if self._told_to_stop():
                self._stop_all()
                return 0
            if signal.SIGHUP in self._signals:
                self._signals = [n for n in self._signals if n != signal.SIGHUP]
                _log("SIGHUP: restarting the workers one at a time")
                self._roll()
                continue
            self._reap()
            now = time.monotonic()
            if len(self.workers) < self.count and now >= self._next_start:
                self._spawn()
            for worker in list(self.workers.values()):
                if not worker.serving and worker.ready >= 0:
                    self._read_ready(worker, 0)
            if self.reload_roots and now >= next_look:
                next_look = now + RELOAD_POLL
                current = source_files(self.reload_roots)
                if current != sources:
                    changed = sorted(set(current.items()) ^ set(sources.items()))
                    _log(f"{changed[0][0]} changed: restarting the workers")
                    sources = current
                    self._roll()
                    continue
            time.sleep(TICK)

    def _died(self, worker: _Worker, status: int) -> None:
        """Log a worker that exited on its own; a worker that dies at start-up again and
        again is started again after a pause that doubles each time."""
        how = (
            f"was killed by signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exited with status {os.WEXITSTATUS(status)}"
        )
        lived = time.monotonic() - worker.started
        self._failures = self._failures + 1 if lived < FAILED_START else 0
        pause = 0.0 if self._failures == 0 else min(0.5 * 2 ** (self._failures - 1), MAX_BACKOFF)
        self._next_start = time.monotonic() + pause
        _log(f"worker {worker.pid} {how}; starting another" + (f" in {pause:g} s" if pause else ""))

    def _roll(self) -> None:
        """Replace each worker by a new one, one at a time, each old one told to stop only
        once its replacement serves. A replacement that does not serve in time ends the
        restart, the old workers left serving."""
        for old in list(self.workers.values()):
            if old.pid not in self.workers:
                continue  # died meanwhile; the main loop starts another
            new = self._spawn()
            deadline = time.monotonic() + self.ready_timeout
            while not self._read_ready(new, min(TICK, max(deadline - time.monotonic(), 0))):
                if self._told_to_stop():
                    return
                self._reap()
                if new.pid not in self.workers or new.ready < 0 or time.monotonic() >= deadline:
                    _log(f"new worker {new.pid} did not start serving: the restart stops, the old workers stay")
                    _signal(new.pid, signal.SIGKILL)
                    self._wait_gone({new.pid}, time.monotonic())
                    return
            _signal(old.pid, signal.SIGTERM)
            self._wait_gone({old.pid}, time.monotonic() + self.stop_timeout)
        _log(f"restarted: workers {sorted(self.workers)}")

    def _stop_all(self) -> None:
        pids = set(self.workers)
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        self._wait_gone(pids, time.monotonic() + self.stop_timeout)


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass
