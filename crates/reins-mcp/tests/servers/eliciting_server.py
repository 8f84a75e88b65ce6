"""An MCP server of the 2025-11-25 revision, over stdio, whose one tool `ask` asks for input (`elicitation/create`,
a form of two required fields) and answers with what it got, or "nobody to ask" when the client declared no
elicitation capability. Plain JSON-RPC lines, so that the test sees exactly what Reins sends back.

  --defaults  both fields of the form have a default (else only `name` has one)
"""

import json
import sys


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


DEFAULTS = "--defaults" in sys.argv[1:]
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "Ada"},
        "count": {"type": "integer", "minimum": 1},
        "colour": {"type": "string", "enum": ["red", "blue"], "default": "blue"},
        "note": {"type": "string"},
    },
    "required": ["name", "count"],
}
if DEFAULTS:
    SCHEMA["properties"]["count"]["default"] = 2
TOOL = {"name": "ask", "description": "Asks the person.", "inputSchema": {"type": "object", "properties": {}}}
pending = None
can_elicit = False

for line in sys.stdin:
    m = json.loads(line)
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        can_elicit = "elicitation" in m["params"].get("capabilities", {})
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "eliciting", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [TOOL]}})
    elif method == "tools/call":
        if not can_elicit:
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "nobody to ask"}]}})
            continue
        pending = mid
        send({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create",
              "params": {"mode": "form", "message": "Who are you?", "requestedSchema": SCHEMA}})
    elif mid == "e1" and pending is not None:
        text = "got " + json.dumps(m.get("result"), sort_keys=True)
        send({"jsonrpc": "2.0", "id": pending, "result": {"content": [{"type": "text", "text": text}]}})
        pending = None
    elif mid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found: " + method}})
