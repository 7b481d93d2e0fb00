# SPDX-License-Identifier: Apache-2.0
"""The smallest UCall server: `python examples/python/sum_server.py [--port 8545]`.

Call it with `curl -s localhost:8545 -d '{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}'`
or `ucall sum a=1 b=2`.
"""

import argparse

from ucall import Server

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--port", type=int, default=8545)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--engine", default="auto")
args = parser.parse_args()

server = Server(port=args.port, host=args.host, threads=args.threads, engine=args.engine)


@server
def sum(a: int, b: int) -> int:
    return a + b


if __name__ == "__main__":
    # Until Ctrl-C or SIGTERM; `ready` runs once serving, with the signal handlers in place.
    server.run(ready=lambda s: print(f"listening on {args.host}:{s.port}", flush=True))
