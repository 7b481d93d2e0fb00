#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python test-vector server as one executable, for UCALL_SPEC_SERVER.
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/../../.venv/bin/python" "$here/spec_server.py" "$@"
