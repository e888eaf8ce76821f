"""The job's source block lists: one gzip tar, ``volume-<i>.json`` per volume in job order (made
by the workflow's list_source_blocks), fetched from a presigned GET.

The fetch is what ``curl --fail --location --retry 5 --retry-connrefused --connect-timeout 20
--max-time 300`` did: up to 6 attempts, 1, 2, 4, 8 and 16 s apart, for timeouts, refused or
reset connections and HTTP 408/429/500/502/503/504; 20 s to connect (and at most 20 s without a
byte); 300 s per attempt. Only https, and http to a loopback host (the local twin's endpoint).
"""

import http.client
import ipaddress
import os
import re
import shutil
import socket
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import IO, Callable, Optional

from .errors import Failure
from .progress import log

ATTEMPTS = 6
FIRST_DELAY = 1.0
CONNECT_SECONDS = 20.0
ATTEMPT_SECONDS = 300.0
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
CHUNK = 1024 * 1024
FETCH_FAILED = (
    "could not fetch the source block lists (does the subnet reach S3? a gateway endpoint or NAT)"
)
UNPACK_FAILED = "could not unpack the source block lists"
MEMBER = re.compile(r"volume-(0|[1-9][0-9]{0,3})\.json")
LOOPBACK_NAMES = ("localhost",)


class _Transient(Exception):
    """A failed attempt worth another one."""


def _loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> None:
    """https, or http to this machine (the twin): a presigned URL made in AWS is https."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and _loopback(parts.hostname or ""):
        return
    raise Failure(
        f"{FETCH_FAILED}: {parts.scheme or 'a URL without scheme'}://{parts.hostname or ''} is "
        "neither https nor http to a loopback host: pass the presigned https URL"
    )


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """--location, but never to a URL ``check_url`` refuses (e.g. https to http)."""

    def redirect_request(  # type: ignore[no-untyped-def]
        self, req, fp, code, msg, headers, newurl
    ):
        check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code in RETRY_STATUSES
    if isinstance(exc, urllib.error.URLError):
        return _transient(exc.reason) if isinstance(exc.reason, BaseException) else False
    return isinstance(
        exc,
        (socket.timeout, TimeoutError, ConnectionError, http.client.IncompleteRead, _Transient),
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def _download(opener: urllib.request.OpenerDirector, url: str, out: IO[bytes]) -> None:
    """One attempt: the body into ``out`` (truncated first), within ATTEMPT_SECONDS."""
    deadline = time.monotonic() + ATTEMPT_SECONDS
    out.seek(0)
    out.truncate()
    with opener.open(url, timeout=CONNECT_SECONDS) as response:
        while True:
            chunk = response.read(CHUNK)
            if not chunk:
                return
            out.write(chunk)
            if time.monotonic() > deadline:
                raise _Transient(f"the download took more than {ATTEMPT_SECONDS:.0f} s")


def fetch(
    url: str,
    dest: str,
    sleep: Callable[[float], None] = time.sleep,
    opener: Optional[urllib.request.OpenerDirector] = None,
) -> None:
    """The body of ``url`` into the file ``dest``; Failure (FETCH_FAILED: why) when it fails."""
    check_url(url)
    opener = opener or urllib.request.build_opener(_CheckedRedirects())
    delay = FIRST_DELAY
    with open(dest, "wb") as out:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                _download(opener, url, out)
                return
            except (OSError, http.client.HTTPException, _Transient) as exc:
                if attempt == ATTEMPTS or not _transient(exc):
                    raise Failure(f"{FETCH_FAILED}: {_describe(exc)}") from exc
                log(f"fetching the source block lists: {_describe(exc)}; again in {delay:.0f} s")
                sleep(delay)
                delay *= 2


def unpack(archive: str, directory: str) -> "dict[int, str]":
    """The block list file of each volume the bundle has (by index); other members are left."""
    found: dict[int, str] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                match = MEMBER.fullmatch(member.name)
                source = tar.extractfile(member) if match and member.isfile() else None
                if match is None or source is None:
                    log(f"source block lists: ignoring member {member.name!r}")
                    continue
                path = os.path.join(directory, member.name)
                with source, open(path, "wb") as out:
                    shutil.copyfileobj(source, out)
                found[int(match.group(1))] = path
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise Failure(f"{UNPACK_FAILED}: {exc}") from exc
    return found
