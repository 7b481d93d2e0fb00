# SPDX-License-Identifier: Apache-2.0
"""UCall's published server classes (``ucall.posix``, ``ucall.uring``, ``ucall.rich_*``)."""

from __future__ import annotations

from typing import Any, Sequence

from ucall._server import Server


class PublishedServer(Server):
    """``Server`` with UCall's published constructor. Extra params are ignored, as before.

    ``queue_depth`` and ``max_callbacks`` are accepted for compatibility; the core sizes
    its queues itself and has no limit on procedures.
    """

    _engine = "auto"

    def __init__(
        self,
        hostname: str = "127.0.0.1",
        port: int = 8545,
        queue_depth: int = 4096,
        max_callbacks: int = 128,
        max_threads: int = 64,
        count_threads: int = 1,
        quiet: bool = False,
        ssl_pk: str | None = None,
        ssl_certs: Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        if (ssl_pk is None) != (not ssl_certs):
            raise ValueError("TLS needs both ssl_pk (the key) and ssl_certs (the certificate chain)")
        self._chain: tuple[str, list[str]] | None = None
        if ssl_pk is not None and ssl_certs:
            options["tls_key"] = ssl_pk
            options["tls_cert"] = _chain_file(list(ssl_certs))
            if len(ssl_certs) > 1:
                self._chain = (options["tls_cert"], [str(c) for c in ssl_certs])
        options.setdefault("engine", self._engine)
        options.setdefault("ignore_extra_params", True)
        super().__init__(
            port=port,
            host=hostname,
            threads=max(1, count_threads),
            max_threads=max(1, max_threads),
            quiet=quiet,
            **options,
        )
        self.queue_depth = queue_depth
        self.max_callbacks = max_callbacks
        self.quiet = quiet

    def start(self) -> Server:
        try:
            return super().start()
        except Exception as error:
            if self._chain is not None:
                # Name the files the caller gave, not the one they were joined into.
                joined, given = self._chain
                error.args = tuple(
                    a.replace(joined, f"(the chain of ssl_certs {given})") if isinstance(a, str) else a
                    for a in error.args
                )
            raise


def _chain_file(certs: list[str]) -> str:
    """One PEM file holding ``certs`` in order (leaf first), as the core reads a chain."""
    if len(certs) == 1:
        return str(certs[0])
    import atexit
    import os
    import tempfile

    parts = []
    for cert in certs:
        try:
            with open(cert, "rb") as part:
                text = part.read()
        except OSError as error:
            raise ValueError(f"TLS certificate {cert}: {error.strerror or error}") from None
        if b"-----BEGIN CERTIFICATE-----" not in text:
            raise ValueError(f"TLS certificate {cert}: no PEM certificate in it")
        parts.append(text.rstrip(b"\n") + b"\n")
    handle, path = tempfile.mkstemp(prefix="ucall-chain-", suffix=".pem")
    with os.fdopen(handle, "wb") as chain:
        chain.writelines(parts)
    atexit.register(os.unlink, path)
    return path


class PosixServer(PublishedServer):
    _engine = "poll"


class UringServer(PublishedServer):
    # io_uring when this build and kernel have it, else the portable engine.
    _engine = "auto"
