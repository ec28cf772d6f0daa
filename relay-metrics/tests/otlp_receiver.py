"""An OTLP metrics receiver for relay-metrics' tests, whose decoding is opentelemetry-proto's.

gRPC: the MetricsService that PyPI's opentelemetry-proto generates, served by grpcio.
HTTP: a small server decoding with opentelemetry-proto's message classes (ParseFromString for
application/x-protobuf, json_format.Parse for application/json; both refuse unknown fields).

Prints "listening PORT", then one JSON line per request received:
{"time", "path", "headers", "status", "peer_cn", "request"} where "request" is the decoded
ExportMetricsServiceRequest (json_format.MessageToDict) or null when refused.

Options: --protocol grpc|http, --tls CERT KEY (serve TLS), --client-ca CA (require a client
certificate signed by CA), --require-header K=V (answer 401 / UNAUTHENTICATED without it),
--fail N:STATUS[:RETRY_AFTER] (answer the first N requests with STATUS: an HTTP code, or a gRPC
code name such as UNAVAILABLE; RETRY_AFTER seconds go into a Retry-After header, or over gRPC
into a google.rpc.RetryInfo detail of the status, googleapis-common-protos' classes).
Runs until killed.
"""

import argparse
import gzip
import http.server
import json
import ssl
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import any_pb2, duration_pb2, json_format
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc as service_grpc

LOCK = threading.Lock()
STATE = {"received": 0}


def emit(record):
    with LOCK:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


def next_index():
    with LOCK:
        STATE["received"] += 1
        return STATE["received"]


def check_no_unknown_fields(message, where="request"):
    """ParseFromString keeps fields it does not know: a strict receiver refuses them."""
    unknown = UnknownFieldSet(message)
    if len(unknown):
        raise ValueError(f"unknown fields in {where}: {[f.field_number for f in unknown]}")
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        # protobuf 7 has `is_repeated`; older versions only `label`.
        repeated = getattr(field, "is_repeated", None)
        if repeated is None:
            repeated = field.label == field.LABEL_REPEATED
        items = value if repeated else [value]
        for item in items:
            if hasattr(item, "ListFields"):
                check_no_unknown_fields(item, f"{where}.{field.name}")


def planned_failure(args, index):
    if args.fail and index <= args.fail[0]:
        return args.fail[1], args.fail[2]
    return None


class HttpHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    args = None

    def log_message(self, *_):
        pass

    def answer(self, code, body=b"", content_type="text/plain", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in extra:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        index = next_index()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        record = {
            "time": time.time(),
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "status": 200,
            "peer_cn": peer_cn(self.connection),
            "request": None,
        }
        try:
            if self.args.require_header:
                key, value = self.args.require_header
                if self.headers.get(key) != value:
                    record["status"] = 401
                    self.answer(401, b"missing credentials")
                    return
            failure = planned_failure(self.args, index)
            if failure:
                code, retry_after = int(failure[0]), failure[1]
                record["status"] = code
                extra = [("Retry-After", retry_after)] if retry_after else []
                self.answer(code, b"planned failure", extra=extra)
                return
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = service.ExportMetricsServiceRequest()
            content_type = self.headers.get("Content-Type")
            if content_type == "application/x-protobuf":
                request.ParseFromString(body)
                check_no_unknown_fields(request)
                response = service.ExportMetricsServiceResponse().SerializeToString()
            elif content_type == "application/json":
                json_format.Parse(body.decode(), request)
                response = json_format.MessageToJson(service.ExportMetricsServiceResponse()).encode()
            else:
                raise ValueError(f"unexpected Content-Type {content_type!r}")
            record["request"] = json_format.MessageToDict(request)
            self.answer(200, response, content_type)
        except Exception as error:  # noqa: BLE001 - reported to the test as a 400
            record["status"] = 400
            record["error"] = repr(error)
            self.answer(400, repr(error).encode())
        finally:
            emit(record)


def peer_cn(connection):
    get = getattr(connection, "getpeercert", None)
    certificate = get() if get else None
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class Servicer(service_grpc.MetricsServiceServicer):
    def __init__(self, args):
        self.args = args

    def Export(self, request, context):
        index = next_index()
        metadata = {key: value for key, value in context.invocation_metadata()}
        record = {
            "time": time.time(),
            "path": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            "headers": metadata,
            "status": "OK",
            "peer_cn": grpc_peer_cn(context),
            "request": None,
        }
        try:
            if self.args.require_header:
                key, value = self.args.require_header
                if metadata.get(key.lower()) != value:
                    record["status"] = "UNAUTHENTICATED"
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing credentials")
            failure = planned_failure(self.args, index)
            if failure:
                record["status"] = failure[0]
                code = getattr(grpc.StatusCode, failure[0])
                if failure[1]:
                    context.set_trailing_metadata(
                        [("grpc-status-details-bin", retry_info_status(code, int(failure[1])))])
                context.abort(code, "planned failure")
            try:
                check_no_unknown_fields(request)
            except ValueError as error:
                record["status"] = "INVALID_ARGUMENT"
                record["error"] = repr(error)
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, repr(error))
            record["request"] = json_format.MessageToDict(request)
            return service.ExportMetricsServiceResponse()
        finally:
            emit(record)


def retry_info_status(code, seconds):
    """A google.rpc.Status with a RetryInfo detail, serialized, as gRPC carries it in trailers."""
    from google.rpc import error_details_pb2, status_pb2

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
    status = status_pb2.Status(code=code.value[0], message="planned failure", details=[detail])
    return status.SerializeToString()


def grpc_peer_cn(context):
    names = context.auth_context().get("x509_common_name")
    return names[0].decode() if names else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--protocol", choices=["grpc", "http"], required=True)
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--client-ca")
    parser.add_argument("--require-header", type=lambda text: tuple(text.split("=", 1)))
    parser.add_argument("--fail", type=lambda text: (int(text.split(":")[0]), text.split(":")[1],
                                                      (text.split(":") + [None])[2]))
    args = parser.parse_args()

    if args.protocol == "grpc":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        service_grpc.add_MetricsServiceServicer_to_server(Servicer(args), server)
        if args.tls:
            key = open(args.tls[1], "rb").read()
            cert = open(args.tls[0], "rb").read()
            ca = open(args.client_ca, "rb").read() if args.client_ca else None
            credentials = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
            port = server.add_secure_port("127.0.0.1:0", credentials)
        else:
            port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        emit_listening(port)
        server.wait_for_termination()
    else:
        HttpHandler.args = args
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HttpHandler)
        if args.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(args.tls[0], args.tls[1])
            if args.client_ca:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(args.client_ca)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        emit_listening(server.server_address[1])
        server.serve_forever()


def emit_listening(port):
    sys.stdout.write(f"listening {port}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
