"""A small MCP server for the reins-mcp tests, written with the PyPI `mcp` package (low-level API).

Every `tools/call` it receives is appended as a JSON line to the file named by REINS_MCP_TEST_LOG (when set),
before anything else happens, so that a test can tell which calls reached the server.

Modes (first argument):
  (none)      a normal server
  --silent    never answers `initialize` (reads stdin forever); starts a `sleep` grandchild first and writes its
              pid to REINS_MCP_TEST_LOG, so a test can check that the whole process group was killed
  --garbage   answers `initialize` and `tools/list`, but answers every `tools/call` with garbage lines
  --bad-name  also lists a tool named `bad.name` (not a valid Reins tool name)
  --bad-schema  also lists a tool whose input schema is not a valid JSON Schema
"""

import json
import os
import subprocess
import sys

LOG = os.environ.get("REINS_MCP_TEST_LOG")
MODE = sys.argv[1] if len(sys.argv) > 1 else ""

if MODE == "--silent":
    # Before the (slow) imports below, so that the grandchild exists well within any start-up timeout.
    child = subprocess.Popen(["sleep", "3600"])
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"grandchild": child.pid, "pid": os.getpid()}) + "\n")
    for _line in sys.stdin:
        pass
    sys.exit(0)

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from mcp.server.lowlevel import NotificationOptions, Server  # noqa: E402
from mcp.server.stdio import stdio_server  # noqa: E402
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler  # noqa: E402
from mcp.shared.subscriptions import ToolsListChanged  # noqa: E402

# A 2026-07-28 client hears list changes on the `subscriptions/listen` stream it opened (served from this bus);
# an earlier one as plain notifications. The server announces each change both ways.
BUS = InMemorySubscriptionBus()
extra_enabled = False
bad_enabled = False


def log(entry):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def text(s):
    return [types.TextContent(type="text", text=s)]


TOOLS = [
    types.Tool(
        name="add",
        description="Adds two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="shout",
        description="Upper-cases a non-empty text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1}},
            "required": ["text"],
        },
    ),
    types.Tool(name="fail", description="Always fails.", input_schema={"type": "object"}),
    types.Tool(
        name="stats",
        description="Only structured content.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="sleep",
        description="Sleeps for some seconds, then answers.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}},
            "required": ["seconds"],
        },
    ),
    types.Tool(
        name="big",
        description="Answers with a text of `bytes` bytes.",
        input_schema={
            "type": "object",
            "properties": {"bytes": {"type": "integer", "minimum": 0}},
            "required": ["bytes"],
        },
    ),
    types.Tool(
        name="lines",
        description="Answers with `count` numbered lines of about 52 characters each.",
        input_schema={
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 0}},
            "required": ["count"],
        },
    ),
    types.Tool(
        name="enable_extra",
        description="Adds the tool `extra` and announces the change.",
        input_schema={"type": "object"},
    ),
    types.Tool(
        name="enable_bad",
        description="Adds a tool whose name Reins refuses and announces the change.",
        input_schema={"type": "object"},
    ),
]
EXTRA = types.Tool(name="extra", description="Exists once enabled.", input_schema={"type": "object"})


BAD_NAME = types.Tool(name="bad.name", description="A name Reins refuses.", input_schema={"type": "object"})
BAD_SCHEMA = types.Tool(
    name="bad_schema",
    description="A schema Reins refuses.",
    input_schema={"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}},
)


async def list_tools(ctx, params):
    tools = TOOLS + ([EXTRA] if extra_enabled else [])
    if MODE == "--bad-name" or bad_enabled:
        tools = tools + [BAD_NAME]
    if MODE == "--bad-schema":
        tools = tools + [BAD_SCHEMA]
    return types.ListToolsResult(tools=tools)


async def announce_tools_changed(ctx):
    await BUS.publish(ToolsListChanged())
    await ctx.session.send_tool_list_changed()
    # Let the listen stream carry the news before the call's answer goes out.
    await anyio.sleep(0.1)


async def call_tool(ctx, params):
    global extra_enabled, bad_enabled
    args = params.arguments or {}
    meta = getattr(params, "meta", None)
    if meta is not None and hasattr(meta, "model_dump"):
        meta = meta.model_dump(mode="json", by_alias=True, exclude_none=True)
    log({"tool": params.name, "arguments": args, "pid": os.getpid(), "meta": meta})
    if MODE == "--garbage":
        sys.stdout.buffer.write(b"this is not JSON\n{\"jsonrpc\": \"2.0\", \"oops\": true}\n\x00\xff\n")
        sys.stdout.buffer.flush()
        await anyio.sleep(3600)
    if params.name == "add":
        total = args["a"] + args["b"]
        return types.CallToolResult(content=text(str(total)), structured_content={"sum": total})
    if params.name == "shout":
        return types.CallToolResult(content=text(args["text"].upper()))
    if params.name == "fail":
        return types.CallToolResult(content=text("it failed on purpose"), is_error=True)
    if params.name == "stats":
        return types.CallToolResult(content=[], structured_content={"calls": 1, "ok": True})
    if params.name == "sleep":
        await anyio.sleep(float(args["seconds"]))
        return types.CallToolResult(content=text("slept"))
    if params.name == "big":
        return types.CallToolResult(content=text("b" * int(args["bytes"])))
    if params.name == "lines":
        body = "".join(f"line {i:06d} " + "x" * 40 + "\n" for i in range(1, int(args["count"]) + 1))
        return types.CallToolResult(content=text(body))
    if params.name == "enable_extra":
        extra_enabled = True
        await announce_tools_changed(ctx)
        return types.CallToolResult(content=text("extra enabled"))
    if params.name == "enable_bad":
        bad_enabled = True
        await announce_tools_changed(ctx)
        return types.CallToolResult(content=text("bad enabled"))
    if params.name == "extra" and extra_enabled:
        return types.CallToolResult(content=text("extra here"))
    return types.CallToolResult(content=text(f"unknown tool {params.name}"), is_error=True)


server = Server(
    "reins-test-py",
    version="1.0.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=ListenHandler(BUS),
)


async def main():
    async with stdio_server() as (read_stream, write_stream):
        await server.run(
            read_stream,
            write_stream,
            server.create_initialization_options(notification_options=NotificationOptions(tools_changed=True)),
        )


if __name__ == "__main__":
    anyio.run(main)
