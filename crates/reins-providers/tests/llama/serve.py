"""Serves the small GGUF model with the prebuilt llama.cpp server of the PyPI package xllamacpp on 127.0.0.1.

Usage: python serve.py --model FILE --template FILE --url-file FILE [--parent-pid PID] [--max-seconds N]

Writes the server's URL to --url-file once it listens. Exits when the parent process is gone (so a CI run
that started it stops it by ending), after --max-seconds, or on SIGTERM.
"""

import argparse
import os
import signal
import socket
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--url-file", required=True)
    ap.add_argument("--parent-pid", type=int, default=0)
    ap.add_argument("--max-seconds", type=int, default=5400)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()

    import xllamacpp as x

    p = x.CommonParams()
    p.model.path = args.model
    p.n_ctx = args.ctx
    p.n_parallel = 1
    p.port = free_port()
    p.use_jinja = True
    with open(args.template, encoding="utf-8") as f:
        p.chat_template = f.read()
    server = x.Server(p)
    url = "http://127.0.0.1:%d" % p.port
    tmp = args.url_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(url)
    os.replace(tmp, args.url_file)
    print("llama server listening on", url, "pid", os.getpid(), flush=True)

    def stop(*_):
        try:
            os.remove(args.url_file)
        except OSError:
            pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started = time.monotonic()
    while True:
        time.sleep(1)
        if args.parent_pid and not alive(args.parent_pid):
            stop()
        if time.monotonic() - started > args.max_seconds:
            stop()


if __name__ == "__main__":
    sys.exit(main())
