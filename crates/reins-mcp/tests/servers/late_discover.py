"""An MCP server (2025-11-25, over stdio, standard library only) that is slow to answer server/discover: it holds the
discovery's answer until the client, tired of waiting, sends initialize, then answers the discovery (late) and only then
the handshake, as a server of both revisions that was slow to start does. A client that takes the late answer for the
handshake's fails; one that drops it goes on. Each method it is asked is appended to the file named by argv[1]."""

import json
import sys

log_path = sys.argv[1]
held = None


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def log(method):
    with open(log_path, "a", encoding="utf-8") as f:
        f.write(method + "\n")


for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if method is None:
        continue
    log(method)
    if "id" not in message:
        continue
    mid = message["id"]
    if method == "server/discover":
        held = mid
        continue
    if method == "initialize":
        if held is not None:
            send({"jsonrpc": "2.0", "id": held, "result": {"supportedVersions": ["2026-07-28"]}})
            held = None
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "late-discover", "version": "1.0.0"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [{
            "name": "hello",
            "description": "Says hello.",
            "inputSchema": {"type": "object", "properties": {}},
        }]}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "hello"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
