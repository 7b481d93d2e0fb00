# SPDX-License-Identifier: Apache-2.0
"""The smallest UCall server: `python examples/python/sum_server.py [--port 8545]`,
or `ucall serve sum_server:server --port 8545` from this directory.

Call it with `curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}'`
or `ucall sum a=1 b=2`.
"""

import argparse

from ucall import Server


def sum(a: int, b: int) -> int:
    return a + b


def make_server(port: int = 8545, host: str = "127.0.0.1", threads: int = 1, engine: str = "auto") -> Server:
    server = Server(port=port, host=host, threads=threads, engine=engine)
    server(sum)
    return server


# What `ucall serve` runs (its --host, --port and --threads apply); nothing binds until it runs.
server = make_server()

if __name__ == "__main__":
    # The command line is read only here, so that importing the module reads none.
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8545)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--engine", default="auto")
    args = parser.parse_args()
    server = make_server(port=args.port, host=args.host, threads=args.threads, engine=args.engine)
    # Until Ctrl-C or SIGTERM; once serving it says where on stderr
    # ("ucall: listening on http://127.0.0.1:8545 (engine ..., 1 thread; 2 procedures: ...)").
    server.run()
