"""Records every API request a Lambda worker sends to the emulator, with the IAM request contexts it
needs resolved at the time of the call (the resources' tags as they are then).

The workers mark their requests with the X-Twin-Caller header (the function's name, set by
twin/runner/lambda_worker.py); the twin's own set-up and inspection clients send none and are not
recorded. A request without the header that uses a presigned URL (SigV4 query authentication,
e.g. the transfer instance's curl of the source-blocks bundle) is recorded as the function whose
access key signed it (X-Amz-Credential; each function has its own key, Emulator.
function_credentials): AWS evaluates a presigned request with the signer's permissions. A request
without the header signed (Authorization: AWS4-HMAC-SHA256 Credential=KEY/...) with a key of the
transfer instance's role (ssm_twin.instance_env: the data plane's EBS direct calls) is recorded as
INSTANCE_CALLER, and the check judges it by the stack's instance role, each authorization with
the session key IAM adds for instance-profile credentials, ec2:SourceInstanceArn (the ARN of the
instance the key was issued to). One JSON line per request:
caller, service, action, params, contexts (or the reason the call could not be resolved, which
the check reports as a failure).

Protocols: query (EC2), JSON with X-Amz-Target (SSM, KMS, ...), and the REST APIs the workflow
uses: EBS direct (ListSnapshotBlocks, StartSnapshot, PutSnapshotBlock, CompleteSnapshot,
GetSnapshotBlock; a put's 512 KiB body is left out of the record) and S3 (path-style, as
boto3 addresses the emulator's IP endpoint).
"""

from __future__ import annotations

import io
import json
import re
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, unquote

from . import resolve

CALLER_HEADER = "X-Twin-Caller"
# the caller name of the transfer instance's role (its requests carry no X-Twin-Caller)
INSTANCE_CALLER = "transfer-instance-role"
# the prefix of a state machine's role as a caller (+ its name): the calls Step Functions makes with
# it to run a startExecution.sync Task, which the runner records (twin/runner/start_execution.mjs)
STATE_MACHINE_CALLER = "state-machine:"
_ENVIRON_KEY = "HTTP_" + CALLER_HEADER.upper().replace("-", "_")


def presigned_credential(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(access key id, service) of a SigV4 presigned URL's X-Amz-Credential, else None."""
    query = parse_qs(environ.get("QUERY_STRING", ""))
    scope = (query.get("X-Amz-Credential") or [""])[0].split("/")
    if len(scope) == 5 and scope[4] == "aws4_request":
        return scope[0], scope[3]
    return None


def signed_access_key(environ: dict[str, Any]) -> str | None:
    """The access key id of a request's SigV4 Authorization header, else None."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    if "Credential=" not in auth:
        return None
    return str(auth.split("Credential=", 1)[1].split("/", 1)[0]).strip()


def _service(environ: dict[str, Any]) -> str:
    auth = environ.get("HTTP_AUTHORIZATION", "")
    # AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/ec2/aws4_request, ...
    if "Credential=" in auth:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 4:
            return scope[3]
    presigned = presigned_credential(environ)
    return presigned[1] if presigned else ""


_EBS_LIST_BLOCKS = re.compile(r"^/snapshots/([^/]+)/blocks/?$")
_EBS_BLOCK = re.compile(r"^/snapshots/([^/]+)/blocks/([^/]+)$")
_EBS_COMPLETE = re.compile(r"^/snapshots/completion/([^/]+)$")
# query parameters that authenticate or route a request, not S3 subresources
_S3_NOT_SUBRESOURCES = {"x-id", "versionId"}
_LIST_PARAMS = (("Prefix", "prefix"), ("MaxKeys", "max-keys"), ("Delimiter", "delimiter"))
_LIST_V1_PARAMS = {"prefix", "max-keys", "delimiter", "marker", "encoding-type"}


def _ebs(environ: dict[str, Any], body: bytes = b"") -> tuple[str, dict[str, Any]]:
    method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
    if method == "POST" and path.rstrip("/") == "/snapshots":
        start = json.loads(body or b"{}")
        return "StartSnapshot", {k: v for k, v in start.items() if k != "ClientToken"}
    block = _EBS_BLOCK.match(path)
    if block and method in ("PUT", "GET"):
        action = "PutSnapshotBlock" if method == "PUT" else "GetSnapshotBlock"
        return action, {"SnapshotId": unquote(block.group(1)), "BlockIndex": block.group(2)}
    complete = _EBS_COMPLETE.match(path)
    if complete and method == "POST":
        return "CompleteSnapshot", {"SnapshotId": unquote(complete.group(1))}
    query = dict(parse_qsl(environ.get("QUERY_STRING", "")))
    m = _EBS_LIST_BLOCKS.match(path)
    if method == "GET" and m:
        params: dict[str, Any] = {"SnapshotId": unquote(m.group(1))}
        for name, wire in (
            ("MaxResults", "maxResults"),
            ("NextToken", "pageToken"),
            ("StartingBlockIndex", "startingBlockIndex"),
        ):
            if wire in query:
                params[name] = query[wire]
        return "ListSnapshotBlocks", params
    return f"{method} {path}", {}


def _s3_delete_keys(body: bytes) -> list[str]:
    root = ET.fromstring(body)
    return [el.text or "" for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Key"]


def _s3(environ: dict[str, Any], body: bytes) -> tuple[str, dict[str, Any]]:
    """Action and params of a path-style S3 request (the operations the workflow can send)."""
    method = environ.get("REQUEST_METHOD", "")
    bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
    query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    first = {k: v[0] for k, v in query.items()}
    presigned = "X-Amz-Credential" in query
    subresources = sorted(
        k for k in query if not k.startswith("X-Amz-") and k not in _S3_NOT_SUBRESOURCES
    )
    params: dict[str, Any] = {"Bucket": bucket}
    if presigned:
        params["Presigned"] = True
    if key:
        params["Key"] = key
    if not bucket:
        return ("ListBuckets" if method == "GET" else f"{method} /"), {}
    if not key:
        if method == "GET" and "list-type" in query:
            for name, wire in _LIST_PARAMS:
                if wire in first:
                    params[name] = first[wire]
            return "ListObjectsV2", params
        if method == "GET" and subresources == ["location"]:
            return "GetBucketLocation", params
        if method == "GET" and set(subresources) <= _LIST_V1_PARAMS:
            params.update({k: first[k] for k in ("prefix",) if k in first})
            return "ListObjects", params
        if method == "HEAD" and not subresources:
            return "HeadBucket", params
        if method == "POST" and subresources == ["delete"]:
            params["Keys"] = _s3_delete_keys(body)
            return "DeleteObjects", params
        return f"{method} /{{Bucket}}?{'&'.join(subresources)}", params
    if "uploadId" in query:
        multipart = {"PUT": "UploadPart", "POST": "CompleteMultipartUpload",
                     "DELETE": "AbortMultipartUpload", "GET": "ListParts"}  # fmt: skip
        return multipart.get(method, f"{method} ?uploadId"), params
    if method == "POST" and subresources == ["uploads"]:
        return "CreateMultipartUpload", params
    if subresources:
        return f"{method} /{{Bucket}}/{{Key}}?{'&'.join(subresources)}", params
    if method == "PUT" and environ.get("HTTP_X_AMZ_COPY_SOURCE"):
        params["CopySource"] = unquote(environ["HTTP_X_AMZ_COPY_SOURCE"])
        return "CopyObject", params
    simple = {
        "PUT": "PutObject",
        "GET": "GetObject",
        "HEAD": "HeadObject",
        "DELETE": "DeleteObject",
    }
    return simple.get(method, f"{method} /{{Bucket}}/{{Key}}"), params


def parse(environ: dict[str, Any], body: bytes) -> tuple[str, str, dict[str, Any]]:
    """(service, action, params) of one request: query protocol (EC2), JSON (SSM, KMS, ...), or
    the REST APIs of EBS direct and S3."""
    service = _service(environ)
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        action = target.rsplit(".", 1)[-1]
        params = json.loads(body or b"{}")
        return service, action, params
    if service == "ebs":
        return (service, *_ebs(environ, body))
    if service == "s3":
        return (service, *_s3(environ, body))
    flat = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    if not flat and environ.get("QUERY_STRING"):
        flat = dict(parse_qsl(environ["QUERY_STRING"], keep_blank_values=True))
    action = flat.pop("Action", "")
    flat.pop("Version", None)
    return service, action, resolve.nest_query(flat)


class Recorder:
    def __init__(
        self,
        path: Path,
        region: str,
        account: str,
        ec2_backend: Any,
        callers_by_key: dict[str, str] | None = None,
        instances_by_key: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.state = resolve.State(region, account, ec2_backend)
        # access key id -> function: who signed a presigned URL (shared with the emulator's state)
        self.callers_by_key = callers_by_key if callers_by_key is not None else {}
        # access key id -> the instance whose role session it is (shared with the emulator's state)
        self.instances_by_key = instances_by_key if instances_by_key is not None else {}
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def record(self, caller: str, environ: dict[str, Any], body: bytes) -> None:
        try:
            service, action, params = parse(environ, body)
        except Exception as exc:  # a request the parser does not understand fails the check
            service, action = _service(environ), "?"
            params = {"method": environ.get("REQUEST_METHOD"), "path": environ.get("PATH_INFO")}
            params["error"] = f"{type(exc).__name__}: {exc}"
        entry: dict[str, Any] = {
            "caller": caller,
            "service": service,
            "action": action,
            "params": params,
        }
        session = self._session_context(environ)
        try:
            entry["contexts"] = [
                {**c.as_json(), "context": {**c.context, **session}}
                for c in resolve.contexts(service, action, params, self.state)
            ]
        except resolve.UnmodelledCall as exc:
            entry["unmodelled"] = str(exc)
        except Exception as exc:  # a resolver bug must fail the check, not the call
            entry["unmodelled"] = (
                f"resolver failed for {service}:{action}: {type(exc).__name__}: {exc}"
            )
        with self._lock, self.path.open("a") as out:
            out.write(json.dumps(entry, default=str) + "\n")

    def _session_context(self, environ: dict[str, Any]) -> dict[str, str]:
        """ec2:SourceInstanceArn of a request signed with an instance's role session, else {}."""
        key = signed_access_key(environ)
        instance = self.instances_by_key.get(key) if key else None
        if not instance:
            return {}
        return {"ec2:SourceInstanceArn": self.state.ec2_arn("instance", instance)}

    def caller_of(self, environ: dict[str, Any]) -> str | None:
        """The role a request is judged as: its X-Twin-Caller, the signer of a presigned URL, or
        the transfer instance's role for a request signed with one of its keys (None: the twin's
        own request, not recorded)."""
        caller = environ.get(_ENVIRON_KEY)
        if caller:
            return str(caller)
        presigned = presigned_credential(environ)
        if presigned:
            return self.callers_by_key.get(presigned[0])
        key = signed_access_key(environ)
        return INSTANCE_CALLER if key and self.callers_by_key.get(key) == INSTANCE_CALLER else None

    def wrap(self, app: Any) -> Any:
        def recording_app(environ: dict[str, Any], start_response: Any) -> Any:
            caller = self.caller_of(environ)
            if caller:
                body = b""
                if environ.get("CONTENT_LENGTH"):
                    length = int(environ["CONTENT_LENGTH"])
                    body = environ["wsgi.input"].read(length) if length else b""
                    environ["wsgi.input"] = io.BytesIO(body)
                # else: no body, or a chunked one the server decodes as it is read: left alone
                self.record(caller, environ, body)
            return app(environ, start_response)

        return recording_app


def install(
    server: Any,
    path: Path,
    region: str,
    account: str,
    ec2_backend: Any,
    callers_by_key: dict[str, str] | None = None,
    instances_by_key: dict[str, str] | None = None,
) -> Recorder:
    """Wrap the WSGI app of a started ThreadedMotoServer (werkzeug serves `server._server.app`)."""
    recorder = Recorder(path, region, account, ec2_backend, callers_by_key, instances_by_key)
    wsgi = server._server
    wsgi.app = recorder.wrap(wsgi.app)
    return recorder
