"""A small MCP server for the reins-mcp tests, written with the PyPI `mcp` package of the 2025-11-25 era (1.30, its
FastMCP API), so that a test talks to a Python server of each revision (tests/servers/py_server.py is 2.3.0's).

Tools: `add`, and `enable_extra`, which adds the tool `extra` and announces the change (tools/list_changed).
"""

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("reins-test-py-v1")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


def extra() -> str:
    """Exists once enabled."""
    return "extra here"


@server.tool()
async def enable_extra(ctx: Context) -> str:
    """Adds the tool `extra` and announces the change."""
    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    return "extra enabled"


@server.resource("note://hello", mime_type="text/plain")
def hello() -> str:
    """A note."""
    return "hello from the 2025-11-25 era"


if __name__ == "__main__":
    server.run("stdio")
