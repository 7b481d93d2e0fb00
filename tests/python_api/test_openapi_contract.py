# SPDX-License-Identifier: Apache-2.0
"""The REST routes keep their own document: schemathesis, a tool nobody here wrote, draws
requests from `/openapi.json` of a Python server with ordinary typed procedures (the
described example) and checks every answer against the same document: no 5xx, the
statuses, content types and bodies it declares, schema-valid requests accepted and
invalid ones refused. A short pass (bounded examples per route) for `make test`; run
`UCALL_SCHEMATHESIS_EXAMPLES=500 pytest tests/python_api/test_openapi_contract.py` for a
longer one."""

from __future__ import annotations

import os
import sys

import pytest

from conftest import REPO_ROOT

schemathesis = pytest.importorskip("schemathesis", reason="make setup installs schemathesis (requirements-dev.txt)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.config import SchemathesisConfig  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "python"))
import described_server  # noqa: E402

EXAMPLES = int(os.environ.get("UCALL_SCHEMATHESIS_EXAMPLES", "25"))


def operations(port: int):
    # A valid request may still meet the procedure's own, declared error (`divide` by 0):
    # 422, which the document lists for it. Any other answer to valid data is a failure.
    config = SchemathesisConfig.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "422"]}}}
    )
    schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{port}/openapi.json", config=config)
    return [result.ok() for result in schema.get_all_operations()]


@pytest.fixture(scope="module")
def server():
    server = described_server.make_server(port=0, engine="poll")
    with server:
        yield server


def test_every_route_keeps_its_document(server):
    base = f"http://127.0.0.1:{server.port}"
    failures: list[str] = []
    tested = []
    for operation in operations(server.port):
        tested.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,  # the same requests each run: a failure here is reproducible
            suppress_health_check=list(HealthCheck),
        )
        def check(case):
            case.call_and_validate(base_url=base)

        try:
            check()
        except Exception as error:  # schemathesis's FailureGroup, with the curl to reproduce
            failures.append(f"{operation.label}:\n{error}")
    assert "GET /divide" in tested and "POST /scale" in tested, tested
    assert not failures, "\n\n".join(failures)
