"""A fake Amazon Bedrock runtime (Converse and ConverseStream) on 127.0.0.1 for the reins-providers tests.

Usage: python fake_bedrock.py --access-key AK --secret-key SK [--session-token T] [--region R] [--bearer TOKEN]
       [--fail TYPE:STATUS]

Prints the port it listens on as its first line, then serves until killed (or its stdin closes). It behaves as the
API does, as strictly as the tests need:
* auth: with --bearer, only `Authorization: Bearer TOKEN` (and no SigV4 headers) passes; otherwise the SigV4
  signature is recomputed with botocore's `SigV4Auth` over the headers the request signed (with the test key), and a
  request whose signature, key, region, service or session token is wrong is refused (403, InvalidSignatureException);
* every request body is validated (with `modelId`) against botocore's `bedrock-runtime` service model by
  `botocore.validate.ParamValidator`, and every response body (a Converse output, or each streamed event) against
  its output shape before it is sent; a request that fails is refused (400, ValidationException);
* the conversation is checked as Bedrock checks it: every `toolUse` of an assistant turn is answered by a
  `toolResult` with the same id in the next user turn, results first; every assistant turn starts with exactly the
  `reasoningContent` blocks the fake issued for it (signed text, and a redacted block on the third turn);
* streamed answers are framed as `application/vnd.amazon.eventstream` (an encoder of ~15 lines here; each frame is
  decoded back with `botocore.eventstream` before it is sent).

The first user text picks the behaviour: `echo N times` runs a tool loop of N turns (each calling `echo`, two calls
on even turns) then answers `done after N turns`; `stop:REASON` answers with that stop reason and usage with cache
reads and writes; `error:TYPE:STATUS` answers HTTP STATUS with `x-amzn-ErrorType: TYPE`; `streamerror:TYPE` streams a
start then a `TYPE` exception frame (--fail answers every request as `error:` would); anything else is answered `hello`.
`GET /_log` answers every exchange so far: path, auth kind, request and response bodies, and contract failures.
"""

import argparse
import base64
import binascii
import hmac
import json
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import botocore
import botocore.session
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer
from botocore.validate import ParamValidator

MODEL = botocore.session.Session().get_service_model("bedrock-runtime")
CONVERSE = MODEL.operation_model("Converse")
STREAM = MODEL.operation_model("ConverseStream")
EVENTS = STREAM.output_shape.members["stream"]


class Refused(Exception):
    def __init__(self, status, kind, message):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def validate(params, shape, what):
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise Refused(400, "ValidationException", "%s does not match %s: %s" % (what, shape.name, report.generate_report()))


def header(name, value):
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + b"\x07" + struct.pack("!H", len(v)) + v


def frame(headers, payload):
    """One event-stream message: prelude (total, headers length), its CRC, headers, payload, the message's CRC."""
    hs = b"".join(header(k, v) for k, v in headers)
    prelude = struct.pack("!II", 16 + len(hs) + len(payload), len(hs))
    head = prelude + struct.pack("!I", binascii.crc32(prelude))
    body = head + hs + payload
    out = body + struct.pack("!I", binascii.crc32(body))
    buf = EventStreamBuffer()
    buf.add_data(out)
    decoded = list(buf)
    assert len(decoded) == 1 and decoded[0].payload == payload, "the encoder disagrees with botocore"
    return out


def event(kind, body):
    if kind in EVENTS.members:
        validate(body, EVENTS.members[kind], "the %s event" % kind)
    payload = json.dumps(body).encode()
    if kind.endswith("Exception"):
        hs = [(":message-type", "exception"), (":exception-type", kind), (":content-type", "application/json")]
    else:
        hs = [(":message-type", "event"), (":event-type", kind), (":content-type", "application/json")]
    return frame(hs, payload)


def signature_of(turn, text):
    return base64.b64encode(("sig:%d:%s" % (turn, text)).encode()).decode()


def issued_reasoning(turn):
    text = "thinking about turn %d" % turn
    blocks = [{"reasoningContent": {"reasoningText": {"text": text, "signature": signature_of(turn, text)}}}]
    if turn == 3:
        blocks.append({"reasoningContent": {"redactedContent": base64.b64encode(b"redacted-%d" % turn).decode()}})
    return blocks


def user_text(messages):
    for b in messages[0]["content"] if messages else []:
        if "text" in b:
            return b["text"]
    return ""


def check_conversation(messages):
    """Bedrock's rules: alternating roles from the user; each assistant turn's calls answered first in the next
    user turn by results with the same ids; each assistant turn opening with the reasoning issued for it."""
    turn = 0
    for i, m in enumerate(messages):
        want = "user" if i % 2 == 0 else "assistant"
        if m["role"] != want:
            raise Refused(400, "ValidationException", "messages[%d] is %s, expected %s" % (i, m["role"], want))
        if m["role"] != "assistant":
            continue
        content = m["content"]
        reasoning = [b for b in content if "reasoningContent" in b]
        if reasoning != issued_reasoning(turn) or content[: len(reasoning)] != reasoning:
            raise Refused(400, "ValidationException",
                          "messages[%d]: the reasoningContent of assistant turn %d was not sent back unchanged and "
                          "first (thinking blocks must be preserved; invalid signature)" % (i, turn))
        turn += 1
        ids = [b["toolUse"]["toolUseId"] for b in content if "toolUse" in b]
        if not ids:
            continue
        if i + 1 >= len(messages):
            raise Refused(400, "ValidationException", "messages[%d]: toolUse without toolResult" % i)
        nxt = messages[i + 1]["content"]
        head = nxt[: len(ids)]
        got = [b["toolResult"]["toolUseId"] for b in head if "toolResult" in b]
        if sorted(got) != sorted(ids) or len(got) != len(head):
            raise Refused(400, "ValidationException",
                          "messages[%d]: the toolUse ids %s are not answered first by toolResult blocks with the same "
                          "ids in the next turn (got %s)" % (i, ids, got))
    later = [b for m in messages for b in m["content"] if "toolResult" in b]
    uses = {b["toolUse"]["toolUseId"] for m in messages for b in m["content"] if "toolUse" in b}
    if any(b["toolResult"]["toolUseId"] not in uses for b in later):
        raise Refused(400, "ValidationException", "a toolResult answers no toolUse")
    return turn


def answer_blocks(body):
    """(content blocks, stop reason, usage) of the answer to a checked request."""
    messages = body["messages"]
    turn = check_conversation(messages)
    first = user_text(messages)
    usage = {"inputTokens": 1000 + 100 * turn, "outputTokens": 50, "cacheReadInputTokens": 90 * turn,
             "cacheWriteInputTokens": 100}
    usage["totalTokens"] = sum(usage.values())
    if first.startswith("stop:"):
        return [{"text": "partial"}], first[5:], usage
    if first.startswith("echo ") and first.endswith(" times"):
        turns = int(first.split()[1])
        blocks = issued_reasoning(turn)
        if turn >= turns:
            return blocks + [{"text": "done after %d turns" % turns}], "end_turn", usage
        if turn % 2 == 1:
            blocks.append({"text": "step %d" % turn})
        calls = 2 if turn % 2 == 0 else 1
        for k in range(calls):
            blocks.append({"toolUse": {"toolUseId": "tooluse_%d_%d" % (turn, k), "name": "echo",
                                       "input": {"text": "%d-%d" % (turn, k)}}})
        return blocks, "tool_use", usage
    return [{"text": "hello"}], "end_turn", usage


def stream_events(blocks, stop, usage):
    out = [("messageStart", {"role": "assistant"})]
    for i, b in enumerate(blocks):
        if "text" in b:
            t = b["text"]
            out += [("contentBlockDelta", {"contentBlockIndex": i, "delta": {"text": t[: len(t) // 2]}}),
                    ("contentBlockDelta", {"contentBlockIndex": i, "delta": {"text": t[len(t) // 2:]}})]
        elif "toolUse" in b:
            u = b["toolUse"]
            j = json.dumps(u["input"])
            out += [("contentBlockStart", {"contentBlockIndex": i,
                                           "start": {"toolUse": {"toolUseId": u["toolUseId"], "name": u["name"]}}}),
                    ("contentBlockDelta", {"contentBlockIndex": i, "delta": {"toolUse": {"input": j[:5]}}}),
                    ("contentBlockDelta", {"contentBlockIndex": i, "delta": {"toolUse": {"input": j[5:]}}})]
        elif "redactedContent" in b["reasoningContent"]:
            r = b["reasoningContent"]["redactedContent"]
            out.append(("contentBlockDelta", {"contentBlockIndex": i,
                                              "delta": {"reasoningContent": {"redactedContent": r}}}))
        else:
            r = b["reasoningContent"]["reasoningText"]
            t = r["text"]
            out += [("contentBlockDelta", {"contentBlockIndex": i, "delta": {"reasoningContent": {"text": t[:7]}}}),
                    ("contentBlockDelta", {"contentBlockIndex": i, "delta": {"reasoningContent": {"text": t[7:]}}}),
                    ("contentBlockDelta", {"contentBlockIndex": i,
                                           "delta": {"reasoningContent": {"signature": r["signature"]}}})]
        out.append(("contentBlockStop", {"contentBlockIndex": i}))
    out += [("messageStop", {"stopReason": stop}), ("metadata", {"usage": usage, "metrics": {"latencyMs": 5}})]
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            body = json.dumps(LOG).encode()
        self.send(200, body)

    def check_auth(self, body):
        auth = self.headers.get("Authorization", "")
        if ARGS.bearer:
            if auth != "Bearer " + ARGS.bearer or self.headers.get("X-Amz-Date"):
                raise Refused(403, "AccessDeniedException", "the Bedrock API key is missing or wrong")
            return "bearer"
        try:
            _, rest = auth.split(" ", 1)
            fields = dict(p.strip().split("=", 1) for p in rest.split(","))
            key, day, region, service, _ = fields["Credential"].split("/")
            signed = fields["SignedHeaders"].split(";")
        except (ValueError, KeyError):
            raise Refused(403, "InvalidSignatureException", "no SigV4 Authorization header")
        if (key, region, service) != (ARGS.access_key, ARGS.region, "bedrock"):
            raise Refused(403, "UnrecognizedClientException", "wrong key, region or service in the credential scope")
        for h in ["host", "x-amz-date"] + (["x-amz-security-token"] if ARGS.session_token else []):
            if h not in signed:
                raise Refused(403, "InvalidSignatureException", "%s is not signed" % h)
        if ARGS.session_token and self.headers.get("X-Amz-Security-Token") != ARGS.session_token:
            raise Refused(403, "UnrecognizedClientException", "the security token is wrong")
        req = AWSRequest(method="POST", url="http://%s%s" % (self.headers["Host"], self.path),
                         headers={h: self.headers.get(h, "") for h in signed}, data=body)
        req.context["timestamp"] = self.headers.get("X-Amz-Date", "")
        if not req.context["timestamp"].startswith(day):
            raise Refused(403, "InvalidSignatureException", "the date and the credential scope disagree")
        signer = SigV4Auth(Credentials(ARGS.access_key, ARGS.secret_key, ARGS.session_token), "bedrock", ARGS.region)
        want = signer.signature(signer.string_to_sign(req, signer.canonical_request(req)), req)
        if not hmac.compare_digest(want, fields.get("Signature", "")):
            raise Refused(403, "InvalidSignatureException",
                          "The request signature we calculated does not match the signature you provided.")
        return "sigv4"

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        entry = {"path": self.path, "request": None, "response": None, "contract": [], "auth": None}
        try:
            entry["auth"] = self.check_auth(raw)
            parts = self.path.split("/")
            if len(parts) != 4 or parts[1] != "model" or parts[3] not in ("converse", "converse-stream"):
                raise Refused(404, "ResourceNotFoundException", "no such operation")
            streamed = parts[3] == "converse-stream"
            body = json.loads(raw)
            entry["request"] = body
            op = STREAM if streamed else CONVERSE
            try:
                validate(dict(body, modelId=unquote(parts[2])), op.input_shape, "the request")
            except Refused as e:
                entry["contract"].append(e.message)
                raise
            first = user_text(body["messages"])
            if ARGS.fail:
                first = "error:%s:%s" % tuple(ARGS.fail.split(":"))
            if first.startswith("error:"):
                _, kind, status = first.split(":")
                raise Refused(int(status), kind, "the fake was asked for a %s" % kind)
            if first.startswith("streamerror:"):
                frames = [event("messageStart", {"role": "assistant"}),
                          event(first.split(":")[1], {"message": "the model stream broke"})]
                entry["response"] = "stream error"
                self.send(200, b"".join(frames), "application/vnd.amazon.eventstream")
                return
            blocks, stop, usage = answer_blocks(body)
            if streamed:
                events = stream_events(blocks, stop, usage)
                entry["response"] = events
                self.send(200, b"".join(event(k, v) for k, v in events), "application/vnd.amazon.eventstream")
            else:
                out = {"output": {"message": {"role": "assistant", "content": blocks}}, "stopReason": stop,
                       "usage": usage, "metrics": {"latencyMs": 5}}
                validate(out, CONVERSE.output_shape, "the response")
                entry["response"] = out
                self.send(200, json.dumps(out).encode())
        except Refused as e:
            entry["refused"] = "%d %s: %s" % (e.status, e.kind, e.message)
            self.send(e.status, json.dumps({"message": e.message}).encode(),
                      extra=[("x-amzn-ErrorType", e.kind + ":http://internal.amazon.com/coral/com.amazon.bedrock/")])
        finally:
            with LOCK:
                LOG.append(entry)


LOCK = threading.Lock()
LOG = []
ARGS = None


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key", required=True)
    p.add_argument("--session-token")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--bearer")
    p.add_argument("--fail", help="TYPE:STATUS: answer every request with this error")
    ARGS = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    print("botocore", botocore.__version__, flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the test closes it (or dies)


if __name__ == "__main__":
    main()
