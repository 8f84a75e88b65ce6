"""Contract check of the reins-providers Gemini adapter against the types of the official SDK (PyPI google-genai).

Usage: python check_gemini.py DIR...

Every file under each DIR (searched recursively) is checked:
* `*.request.json`: a request body the adapter sent. google-genai has no request model, so a small one is built
  from its own types (`contents`, `tools`, `toolConfig`, `systemInstruction`, `generationConfig`: the fields
  of `generateContent`'s body), refusing unknown keys at every level as the SDK's types do; beyond the types,
  each content's role is `user` or `model` and each part holds exactly one kind of data.
* any other `*.json`: a whole response, as `GenerateContentResponse`.
* `*.sse`: a streamed response, each event's data as `GenerateContentResponse`.

Bytes fields (`thoughtSignature`, `inlineData.data`) are validated from JSON, so they must be base64. An enum
value the SDK does not know (which it only warns about) is a failure here.

Prints one line per file and a final "N passed, M failed" line; exits 1 on any failure.
"""

import sys
import warnings
from pathlib import Path
from typing import Optional

import google.genai
from google.genai import _common
from google.genai import types

warnings.simplefilter("error")

DATA_FIELDS = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
               "codeExecutionResult")


class GenerateContentRequest(_common.BaseModel):
    """The body of `models.generateContent` / `streamGenerateContent`, from the SDK's own types."""

    contents: list[types.Content]
    tools: Optional[list[types.Tool]] = None
    tool_config: Optional[types.ToolConfig] = None
    system_instruction: Optional[types.Content] = None
    generation_config: Optional[types.GenerationConfig] = None


def check_parts(where, parts):
    if not parts:
        raise ValueError("%s has no parts" % where)
    for i, p in enumerate(parts):
        kinds = [k for k in DATA_FIELDS if k in p]
        if len(kinds) != 1 and not (kinds == [] and "thoughtSignature" in p):
            raise ValueError("%s.parts[%d] holds %s, not exactly one kind of data" % (where, i, kinds or "none"))


def check_request(raw):
    import json

    body = json.loads(raw)
    GenerateContentRequest.model_validate_json(raw)
    for n, c in enumerate(body["contents"]):
        if c.get("role") not in ("user", "model"):
            raise ValueError("contents[%d].role is %r" % (n, c.get("role")))
        check_parts("contents[%d]" % n, c.get("parts"))
    if "systemInstruction" in body:
        check_parts("systemInstruction", body["systemInstruction"].get("parts"))


def sse_events(raw):
    text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    events = []
    for block in text.split("\n\n"):
        data = [line[5:].lstrip(" ") if line.startswith("data:") else None for line in block.split("\n")]
        data = [d for d in data if d is not None]
        if data:
            events.append("\n".join(data))
    return events


def check_stream(raw):
    events = sse_events(raw)
    if not events:
        raise ValueError("no event in the stream")
    for n, data in enumerate(events):
        try:
            types.GenerateContentResponse.model_validate_json(data)
        except Exception as e:
            raise ValueError("event %d: %s" % (n, e))
    return len(events)


def main():
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

    print("google-genai %s" % google.genai.__version__)
    for d in sys.argv[1:]:
        for f in sorted(Path(d).rglob("*")):
            if not f.is_file():
                continue
            label = str(f.relative_to(d))
            raw = f.read_bytes()
            if f.name.endswith(".request.json"):
                run("request %s" % label, lambda raw=raw: check_request(raw))
            elif f.suffix == ".json":
                run("response %s" % label, lambda raw=raw: types.GenerateContentResponse.model_validate_json(raw) and None)
            elif f.suffix == ".sse":
                run("stream %s" % label, lambda raw=raw: check_stream(raw))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
