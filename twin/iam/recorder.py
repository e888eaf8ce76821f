"""Records every API request a Lambda worker sends to the emulator, with the IAM request contexts it
needs resolved at the time of the call (the resources' tags as they are then).

The workers mark their requests with the X-Twin-Caller header (the function's name, set by
twin/runner/lambda_worker.py); the twin's own set-up and inspection clients send none and are not
recorded. One JSON line per request: caller, service, action, params, contexts (or the reason the
call could not be resolved, which the check reports as a failure).
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from . import resolve

CALLER_HEADER = "X-Twin-Caller"
_ENVIRON_KEY = "HTTP_" + CALLER_HEADER.upper().replace("-", "_")


def _service(environ: dict[str, Any]) -> str:
    auth = environ.get("HTTP_AUTHORIZATION", "")
    # AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/ec2/aws4_request, ...
    if "Credential=" in auth:
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/")
        if len(scope) >= 4:
            return scope[3]
    return ""


def parse(environ: dict[str, Any], body: bytes) -> tuple[str, str, dict[str, Any]]:
    """(service, action, params) of one request: query protocol (EC2) or JSON (SSM, KMS, ...)."""
    service = _service(environ)
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        action = target.rsplit(".", 1)[-1]
        params = json.loads(body or b"{}")
        return service, action, params
    flat = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    if not flat and environ.get("QUERY_STRING"):
        flat = dict(parse_qsl(environ["QUERY_STRING"], keep_blank_values=True))
    action = flat.pop("Action", "")
    flat.pop("Version", None)
    return service, action, resolve.nest_query(flat)


class Recorder:
    def __init__(self, path: Path, region: str, account: str, ec2_backend: Any) -> None:
        self.path = path
        self.state = resolve.State(region, account, ec2_backend)
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def record(self, caller: str, environ: dict[str, Any], body: bytes) -> None:
        service, action, params = parse(environ, body)
        entry: dict[str, Any] = {
            "caller": caller,
            "service": service,
            "action": action,
            "params": params,
        }
        try:
            entry["contexts"] = [
                c.as_json() for c in resolve.contexts(service, action, params, self.state)
            ]
        except resolve.UnmodelledCall as exc:
            entry["unmodelled"] = str(exc)
        except Exception as exc:  # a resolver bug must fail the check, not the call
            entry["unmodelled"] = (
                f"resolver failed for {service}:{action}: {type(exc).__name__}: {exc}"
            )
        with self._lock, self.path.open("a") as out:
            out.write(json.dumps(entry, default=str) + "\n")

    def wrap(self, app: Any) -> Any:
        def recording_app(environ: dict[str, Any], start_response: Any) -> Any:
            caller = environ.get(_ENVIRON_KEY)
            if caller:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length) if length else b""
                environ["wsgi.input"] = io.BytesIO(body)
                self.record(caller, environ, body)
            return app(environ, start_response)

        return recording_app


def install(server: Any, path: Path, region: str, account: str, ec2_backend: Any) -> Recorder:
    """Wrap the WSGI app of a started ThreadedMotoServer (werkzeug serves `server._server.app`)."""
    recorder = Recorder(path, region, account, ec2_backend)
    wsgi = server._server
    wsgi.app = recorder.wrap(wsgi.app)
    return recorder
