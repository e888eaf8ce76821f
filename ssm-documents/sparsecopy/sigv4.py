"""AWS Signature Version 4 from the standard library (hmac, hashlib): what the EBS direct APIs
need, signed the way botocore's SigV4Auth signs (test/dataplane/test_ebs_direct.py compares).

PutSnapshotBlock's body is not signed (botocore: auth type ``v4-unsigned-body``): the request
carries ``X-Amz-Content-SHA256: UNSIGNED-PAYLOAD`` and that constant stands in for the payload
hash; the block's own SHA-256 travels in the signed ``x-amz-Checksum`` header instead."""

import datetime
import hashlib
import hmac
from typing import NamedTuple, Optional
from urllib.parse import quote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
TIMESTAMP = "%Y%m%dT%H%M%SZ"
# botocore's SIGNED_HEADERS_BLACKLIST: hop-by-hop and tracing headers stay unsigned
UNSIGNED_HEADERS = frozenset(
    (
        "baggage",
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
    )
)


class Credentials(NamedTuple):
    access_key: str
    secret_key: str
    token: Optional[str] = None


class Request(NamedTuple):
    """``url`` without its query; ``query`` as (name, value) pairs, not yet encoded."""

    method: str
    url: str
    query: "list[tuple[str, str]]"
    headers: "dict[str, str]"
    payload_hash: str


def encode(text: str) -> str:
    """RFC 3986 percent-encoding, as the canonical request wants it."""
    return quote(text, safe="-_.~")


def query_string(query: "list[tuple[str, str]]") -> str:
    """The canonical (sorted, encoded) query; also what goes on the wire."""
    return "&".join(f"{k}={v}" for k, v in sorted((encode(k), encode(v)) for k, v in query))


def host_of(url: str) -> str:
    """The Host header: the URL's netloc without a default port."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    host = parts.hostname or ""
    if parts.port and parts.port != default:
        return f"{host}:{parts.port}"
    return host


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = _hmac(f"AWS4{secret}".encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return key


def _canonical_headers(headers: "dict[str, str]") -> "tuple[str, str]":
    signed = {}
    for name, value in headers.items():
        if name.lower() not in UNSIGNED_HEADERS:
            signed[name.lower()] = " ".join(str(value).split())
    names = sorted(signed)
    return "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names)


def sign(
    request: Request,
    credentials: Credentials,
    region: str,
    service: str,
    now: Optional[datetime.datetime] = None,
) -> "dict[str, str]":
    """The request's headers plus Host, X-Amz-Date, X-Amz-Security-Token (if any) and
    Authorization: everything to send."""
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = moment.strftime(TIMESTAMP)
    headers = dict(request.headers)
    if not any(k.lower() == "host" for k in headers):
        headers["Host"] = host_of(request.url)
    headers["X-Amz-Date"] = stamp
    if credentials.token:
        headers["X-Amz-Security-Token"] = credentials.token
    canonical, signed = _canonical_headers(headers)
    path = quote(urlsplit(request.url).path or "/", safe="/~")
    canonical_request = "\n".join(
        (
            request.method.upper(),
            path,
            query_string(request.query),
            canonical,
            signed,
            request.payload_hash,
        )
    )
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        (ALGORITHM, stamp, scope, hashlib.sha256(canonical_request.encode("utf-8")).hexdigest())
    )
    key = signing_key(credentials.secret_key, stamp[:8], region, service)
    signature = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return headers
