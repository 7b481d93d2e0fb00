# SPDX-License-Identifier: Apache-2.0
"""The tools the MCP conformance server scenarios call, served by UCall (make test-mcp-conformance)."""

from ucall import Server

server = Server(port=0, mcp=True)


@server
def test_simple_text() -> str:
    """Tests simple text content response"""
    return "This is a simple text response for testing."


@server
def test_error_handling() -> str:
    """Tests error response"""
    raise ValueError("This tool intentionally returns an error for testing")


@server
def test_tool_with_progress(steps: int = 3):
    """Tests tool that reports progress notifications"""
    for i in range(3):
        yield f"step {i}"
    return "done"
