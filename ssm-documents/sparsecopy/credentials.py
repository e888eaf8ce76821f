"""Credentials, region and endpoint for the EBS direct APIs, from the standard library.

- Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) when set (tests,
  the twin, the bench), else the instance role through IMDSv2 (PUT a session token, then
  /latest/meta-data/iam/security-credentials/<role>), fetched again REFRESH_SECONDS before
  their Expiration so a long copy never signs with expired keys.
- Region: AWS_REGION / AWS_DEFAULT_REGION, else IMDS /latest/meta-data/placement/region.
- Endpoint: AWS_ENDPOINT_URL_EBS (botocore's name for it) else https://ebs.<region>.amazonaws.com.
- IMDS: AWS_EC2_METADATA_SERVICE_ENDPOINT (botocore's name) else http://169.254.169.254.
"""

import datetime
import json
import os
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Callable, Optional

from .errors import Failure
from .sigv4 import Credentials

IMDS = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
REFRESH_SECONDS = 600  # fetch new role credentials 10 minutes before they expire
IMDS_TIMEOUT = 5.0
IMDS_ATTEMPTS = 3


def _imds_base(env: Mapping[str, str]) -> str:
    return env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", IMDS).rstrip("/")


def _imds_get(base: str, path: str) -> str:
    """One IMDSv2 read (a fresh session token each time: reads are rare), retried briefly."""
    last: Optional[Exception] = None
    for attempt in range(IMDS_ATTEMPTS):
        try:
            put = urllib.request.Request(
                f"{base}/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
            )
            with urllib.request.urlopen(put, timeout=IMDS_TIMEOUT) as answer:
                token = answer.read().decode()
            get = urllib.request.Request(
                f"{base}{path}", headers={"X-aws-ec2-metadata-token": token}
            )
            with urllib.request.urlopen(get, timeout=IMDS_TIMEOUT) as answer:
                return str(answer.read().decode())
        except OSError as exc:  # URLError and HTTPError are OSErrors
            last = exc
            time.sleep(0.5 * (attempt + 1))
    raise Failure(f"instance metadata {path}: {last}")


def _parse_expiration(text: str) -> float:
    """IMDS's Expiration ("2026-11-23T08:00:00Z") as epoch seconds."""
    moment = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


class CredentialSource:
    """Thread-safe: ``get()`` returns usable credentials, refreshing the role's in time."""

    def __init__(
        self,
        env: Optional[Mapping[str, str]] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.env = os.environ if env is None else env
        self.clock = clock
        self.lock = threading.Lock()
        self.current: Optional[Credentials] = None
        self.expires = 0.0
        self.fetches = 0

    def _from_env(self) -> Optional[Credentials]:
        key, secret = self.env.get("AWS_ACCESS_KEY_ID"), self.env.get("AWS_SECRET_ACCESS_KEY")
        if key and secret:
            return Credentials(key, secret, self.env.get("AWS_SESSION_TOKEN") or None)
        return None

    def _from_imds(self) -> "tuple[Credentials, float]":
        base = _imds_base(self.env)
        roles = _imds_get(base, "/latest/meta-data/iam/security-credentials/").split()
        if not roles:
            raise Failure("instance metadata: the instance has no role")
        doc = json.loads(_imds_get(base, f"/latest/meta-data/iam/security-credentials/{roles[0]}"))
        if doc.get("Code", "Success") != "Success":
            raise Failure(f"instance metadata: role credentials: {doc.get('Code')}")
        creds = Credentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token"))
        return creds, _parse_expiration(doc["Expiration"])

    def get(self) -> Credentials:
        static = self._from_env()
        if static:
            return static
        with self.lock:
            if self.current is None or self.clock() >= self.expires - REFRESH_SECONDS:
                self.current, self.expires = self._from_imds()
                self.fetches += 1
            return self.current


def region(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    found = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    return found or _imds_get(_imds_base(env), "/latest/meta-data/placement/region").strip()


def endpoint(region_name: str, env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return env.get("AWS_ENDPOINT_URL_EBS") or f"https://ebs.{region_name}.amazonaws.com"
