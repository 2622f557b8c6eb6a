#!/usr/bin/env python3
"""Cold-start harness for the Lambda bootstraps: serves a minimal Lambda
Runtime API on loopback, starts a function binary against it, and measures
init (process start until it asks for its first invocation) and the first
invocation's round trip (an event for a route that needs no database: the
404 fallback for HTTP functions, a scheduled tick for the publisher with the
services from the environment). Prints one JSON line per binary: size and
median timings over --runs starts.

Usage: scripts/measure-init.py [--runs 5] path/to/ingest path/to/publisher ...
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HTTP_EVENT = {
    "version": "2.0", "routeKey": "$default", "rawPath": "/v1/nothing-here", "rawQueryString": "",
    "headers": {"host": "localhost"}, "isBase64Encoded": False,
    "requestContext": {"http": {"method": "GET", "path": "/v1/nothing-here", "protocol": "HTTP/1.1",
                                "sourceIp": "127.0.0.1", "userAgent": "measure"},
                       "requestId": "r", "routeKey": "$default", "stage": "$default", "timeEpoch": 0,
                       "accountId": "1", "apiId": "a", "domainName": "localhost", "domainPrefix": "l", "time": "x"},
}
SCHEDULE_EVENT = {"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}


class Runtime:
    def __init__(self, event):
        self.event = json.dumps(event).encode()
        self.first_next = threading.Event()
        self.answered = threading.Event()
        self.first_next_at = self.answered_at = None
        self.handed_out = False
        runtime = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path.endswith("/invocation/next"):
                    if runtime.first_next_at is None:
                        runtime.first_next_at = time.monotonic()
                        runtime.first_next.set()
                    if runtime.handed_out:
                        time.sleep(30)  # no second invocation; the process is killed
                        return
                    runtime.handed_out = True
                    runtime.sent_at = time.monotonic()
                    self.send_response(200)
                    self.send_header("Lambda-Runtime-Aws-Request-Id", "req-1")
                    self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 60_000))
                    self.send_header("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:1:function:f")
                    self.send_header("Content-Length", str(len(runtime.event)))
                    self.end_headers()
                    self.wfile.write(runtime.event)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                runtime.body = self.rfile.read(length) if length else b""
                runtime.status_path = self.path
                runtime.answered_at = time.monotonic()
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                runtime.answered.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.server.server_address[1]}"


def measure(binary, event):
    runtime = Runtime(event)
    env = dict(os.environ, AWS_LAMBDA_RUNTIME_API=runtime.address, AWS_LAMBDA_FUNCTION_NAME=os.path.basename(binary),
               AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256", AWS_LAMBDA_FUNCTION_VERSION="$LATEST", RELAYOPS_LOG="warn")
    started = time.monotonic()
    process = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not runtime.first_next.wait(30):
            raise SystemExit(f"{binary}: never asked for an invocation")
        runtime.answered.wait(30)
        init_ms = (runtime.first_next_at - started) * 1000
        first_ms = (runtime.answered_at - runtime.sent_at) * 1000 if runtime.answered_at else None
        return init_ms, first_ms, runtime.status_path
    finally:
        process.kill()
        process.wait()
        runtime.server.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    for binary in args.binaries:
        event = SCHEDULE_EVENT if os.path.basename(os.path.dirname(binary)) == "publisher" \
            or os.path.basename(binary) == "publisher" else HTTP_EVENT
        results = [measure(binary, event) for _ in range(args.runs)]
        print(json.dumps({
            "binary": binary,
            "size_bytes": os.path.getsize(binary),
            "init_ms_median": round(statistics.median(r[0] for r in results), 1),
            "init_ms_max": round(max(r[0] for r in results), 1),
            "first_invocation_ms_median": round(statistics.median(r[1] for r in results if r[1] is not None), 1)
            if any(r[1] is not None for r in results) else None,
            "first_invocation_outcome": results[-1][2],
        }))


if __name__ == "__main__":
    main()
