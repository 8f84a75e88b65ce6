"""Contract check of the reins-providers wire formats against the official SDKs' own types.

Usage: python check_contract.py --requests DIR --fixtures DIR

* Every request body under --requests/{openai_responses,openai_chat,anthropic}/*.json (captured from the
  adapters by a local server) must validate against the SDK's request params type
  (ResponseCreateParams*, CompletionCreateParams*, MessageCreateParams*), with unknown keys refused at every
  level and every lazily validated iterable consumed.
* Every canned response under --fixtures/<api>/*.json must validate as the SDK's response model
  (Response, ChatCompletion, Message), and every event of every --fixtures/<api>/*.sse, framed by the SDK's
  own SSE decoder, as the SDK's stream-event type (ResponseStreamEvent, ChatCompletionChunk,
  RawMessageStreamEvent). Fields the SDK does not know are refused too, except a short allowlist of
  documented vendor extensions; event types kept unknown on purpose (to test that they are ignored) are
  skipped.

Prints one line per file and a final "N passed, M failed" line; exits 1 on any failure.
"""

import argparse
import json
import sys
import typing
from pathlib import Path

import pydantic
from typing_extensions import is_typeddict

import anthropic.types as at
import openai.types.chat as oc
import openai.types.responses as orsp
from anthropic.types import message_create_params as amcp
from openai.types.chat import completion_create_params as occp
from openai.types.responses import response_create_params as orcp

# Event types the fixtures carry on purpose to show that unknown events are ignored.
DELIBERATELY_UNKNOWN = {"response.future_feature.delta", "future_event"}
# Fields outside the SDK types that real servers send and the adapters read on purpose.
ALLOWED_EXTRAS = {"reasoning_content"}


def forbid_extra(tp, seen):
    """Makes every TypedDict reachable from `tp` refuse unknown keys."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return
    if origin is not None:
        for arg in typing.get_args(tp):
            forbid_extra(arg, seen)
        return
    if is_typeddict(tp) and tp not in seen:
        seen.add(tp)
        tp.__pydantic_config__ = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
        try:
            hints = typing.get_type_hints(tp, include_extras=True)
        except Exception:
            hints = getattr(tp, "__annotations__", {})
        for hint in hints.values():
            forbid_extra(hint, seen)


def consume(v):
    """Pydantic validates Iterable[...] fields lazily: iterate them so that their items are checked."""
    if isinstance(v, dict):
        for item in v.values():
            consume(item)
    elif isinstance(v, (list, tuple)):
        for item in v:
            consume(item)
    elif hasattr(v, "__next__"):
        for item in v:
            consume(item)


def adapters(streaming, non_streaming):
    seen = set()
    forbid_extra(streaming, seen)
    forbid_extra(non_streaming, seen)
    return pydantic.TypeAdapter(streaming), pydantic.TypeAdapter(non_streaming)


REQUEST_TYPES = {
    "openai_responses": adapters(orcp.ResponseCreateParamsStreaming, orcp.ResponseCreateParamsNonStreaming),
    "openai_chat": adapters(occp.CompletionCreateParamsStreaming, occp.CompletionCreateParamsNonStreaming),
    "anthropic": adapters(amcp.MessageCreateParamsStreaming, amcp.MessageCreateParamsNonStreaming),
}

RESPONSE_TYPES = {
    "openai_responses": pydantic.TypeAdapter(orsp.Response),
    "openai_chat": pydantic.TypeAdapter(oc.ChatCompletion),
    "anthropic": pydantic.TypeAdapter(at.Message),
}

EVENT_TYPES = {
    "openai_responses": pydantic.TypeAdapter(orsp.ResponseStreamEvent),
    "openai_chat": pydantic.TypeAdapter(oc.ChatCompletionChunk),
    "anthropic": pydantic.TypeAdapter(at.RawMessageStreamEvent),
}


def extras(model, path="$"):
    """Fields of a validated SDK model that the SDK does not declare."""
    found = []
    if isinstance(model, pydantic.BaseModel):
        for k, v in (model.model_extra or {}).items():
            if k not in ALLOWED_EXTRAS:
                found.append("%s.%s" % (path, k))
        for name in type(model).model_fields:
            found += extras(getattr(model, name, None), "%s.%s" % (path, name))
    elif isinstance(model, (list, tuple)):
        for i, item in enumerate(model):
            found += extras(item, "%s[%d]" % (path, i))
    elif isinstance(model, dict):
        for k, item in model.items():
            found += extras(item, "%s.%s" % (path, k))
    return found


def check_request(api, body):
    streaming, non_streaming = REQUEST_TYPES[api]
    ta = streaming if body.get("stream") else non_streaming
    consume(ta.validate_python(body))


def check_response(api, body):
    model = RESPONSE_TYPES[api].validate_python(body)
    bad = extras(model)
    if bad:
        raise ValueError("fields unknown to the SDK: " + ", ".join(bad))


def sse_events(api, raw):
    if api == "anthropic":
        from anthropic._streaming import SSEDecoder
    else:
        from openai._streaming import SSEDecoder
    return list(SSEDecoder().iter_bytes(iter([raw])))


def check_stream(api, raw):
    events = sse_events(api, raw)
    if not events:
        raise ValueError("the SDK's SSE decoder found no event")
    checked = 0
    for n, ev in enumerate(events):
        if ev.data.strip() == "[DONE]":
            continue
        data = json.loads(ev.data)
        typ = data.get("type", "")
        if ev.event and typ and ev.event != typ:
            raise ValueError("event %d: the SSE event name %r differs from its type %r" % (n, ev.event, typ))
        if typ in DELIBERATELY_UNKNOWN or typ == "ping":
            continue
        if api == "anthropic" and typ == "error":
            model = pydantic.TypeAdapter(at.ErrorResponse).validate_python(data)
        else:
            model = EVENT_TYPES[api].validate_python(data)
        bad = extras(model)
        if bad:
            raise ValueError("event %d (%s): fields unknown to the SDK: %s" % (n, typ, ", ".join(bad)))
        checked += 1
    return checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    passed = failed = 0

    def run(label, fn):
        nonlocal passed, failed
        try:
            detail = fn()
            passed += 1
            print("ok   %s%s" % (label, "" if detail is None else " (%s events)" % detail))
        except Exception as e:  # report every failure, not just the first
            failed += 1
            print("FAIL %s: %s" % (label, str(e).replace("\n", "\n     ")))

    for api in REQUEST_TYPES:
        req_files = sorted(Path(args.requests, api).glob("*.json"))
        if not req_files:
            failed += 1
            print("FAIL %s: no captured request bodies under %s" % (api, Path(args.requests, api)))
        for f in req_files:
            body = json.loads(f.read_text(encoding="utf-8"))
            run("request %s/%s" % (api, f.name), lambda body=body, api=api: check_request(api, body))
        for f in sorted(Path(args.fixtures, api).glob("*.json")):
            body = json.loads(f.read_text(encoding="utf-8"))
            run("response %s/%s" % (api, f.name), lambda body=body, api=api: check_response(api, body))
        for f in sorted(Path(args.fixtures, api).glob("*.sse")):
            raw = f.read_bytes()
            run("stream %s/%s" % (api, f.name), lambda raw=raw, api=api: check_stream(api, raw))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
