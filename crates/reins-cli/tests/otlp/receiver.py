"""An OTLP trace receiver for the tests: gRPC and HTTP (POST /v1/traces, protobuf) on 127.0.0.1, both on free ports.
Prints {"grpc": PORT, "http": PORT} on stdout once listening, then appends one JSON line per span received to the
file given as its argument: protocol, resource and span attributes, names, ids, kind and status."""
import json, sys, threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as svc, trace_service_pb2_grpc as svc_grpc

out, lock = open(sys.argv[1], "a", encoding="utf-8"), threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def record(protocol, request):
    with lock:
        for rs in request.resource_spans:
            resource = {a.key: value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.write(json.dumps({
                        "protocol": protocol, "resource": resource, "scope": ss.scope.name, "name": s.name,
                        "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(), "parent_span_id": s.parent_span_id.hex(),
                        "kind": s.kind, "status": {"code": s.status.code, "message": s.status.message},
                        "attributes": {a.key: value(a.value) for a in s.attributes},
                    }) + "\n")
        out.flush()


class Traces(svc_grpc.TraceServiceServicer):
    def Export(self, request, context):
        record("grpc", request)
        return svc.ExportTraceServiceResponse()


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path != "/v1/traces" or self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(404 if self.path != "/v1/traces" else 415)
            self.end_headers()
            return
        record("http", svc.ExportTraceServiceRequest.FromString(body))
        reply = svc.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
svc_grpc.add_TraceServiceServicer_to_server(Traces(), server)
grpc_port = server.add_insecure_port("127.0.0.1:0")
server.start()
http = ThreadingHTTPServer(("127.0.0.1", 0), Http)
print(json.dumps({"grpc": grpc_port, "http": http.server_address[1]}), flush=True)
http.serve_forever()
