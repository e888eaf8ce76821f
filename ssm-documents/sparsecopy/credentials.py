"""Credentials, region and endpoint for the EBS direct APIs, from the standard library.

- Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) when set (tests,
  the twin, the bench), else the instance role through IMDSv2 (PUT a session token, then
  /latest/meta-data/iam/security-credentials/<role>). EC2 may hand out role credentials with
  less than 5 minutes left: they are used while they are valid, a fetch is tried from
  REFRESH_SECONDS before their Expiration, at most once every REFRESH_INTERVAL seconds and by one
  thread at a time (the others keep signing with the valid ones); a failed fetch keeps the valid
  ones. ``refresh()`` (after EBS answered ExpiredToken) makes the next ``get()`` fetch.
- IMDS: AWS_EC2_METADATA_SERVICE_ENDPOINT (botocore's name) else http://169.254.169.254, never
  through a proxy (urllib would honour http_proxy from the environment); 429, 5xx, 401 (a stale
  session token) and connection errors are retried with backoff, any other answer is final.
- Region: AWS_REGION / AWS_DEFAULT_REGION, else IMDS /latest/meta-data/placement/region.
- Endpoint: AWS_ENDPOINT_URL_EBS (botocore's name for it) else https://ebs.<region>.<suffix>
  (ebs-fips.<region>.<suffix> with AWS_USE_FIPS_ENDPOINT=true, botocore's rule), the suffix of
  the Region's partition from IMDS services/domain on the instance (amazonaws.com.cn in China,
  c2s.ic.gov in ISO, ...).
"""

import datetime
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Callable, Optional

from .errors import Failure
from .sigv4 import Credentials

IMDS = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
REFRESH_SECONDS = 600  # try to fetch new role credentials from 10 minutes before they expire
REFRESH_INTERVAL = 45.0  # ... at most this often
EXPIRY_MARGIN = 15.0  # credentials this close to their Expiration are not used any more
IMDS_TIMEOUT = 5.0
IMDS_ATTEMPTS = 6  # backoff 0.5, 1, 2, 4, 8 s between them
IMDS_RETRY_STATUSES = frozenset((401, 429, 500, 502, 503, 504))
# Region prefix -> DNS suffix of its partition (botocore's endpoints.json); others amazonaws.com
DNS_SUFFIXES = (
    ("cn-", "amazonaws.com.cn"),
    ("us-isob-", "sc2s.sgov.gov"),
    ("us-isof-", "csp.hci.ic.gov"),
    ("us-iso-", "c2s.ic.gov"),
    ("eu-isoe-", "cloud.adc-e.uk"),
    ("eusc-", "amazonaws.eu"),
)
# IMDS is link-local: never through a proxy, whatever http_proxy says
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _imds_base(env: Mapping[str, str]) -> str:
    return env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", IMDS).rstrip("/")


def _imds_once(base: str, path: str) -> str:
    put = urllib.request.Request(
        f"{base}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
    )
    with _DIRECT.open(put, timeout=IMDS_TIMEOUT) as answer:
        token = answer.read().decode()
    get = urllib.request.Request(f"{base}{path}", headers={"X-aws-ec2-metadata-token": token})
    with _DIRECT.open(get, timeout=IMDS_TIMEOUT) as answer:
        return str(answer.read().decode())


def _imds_get(base: str, path: str) -> str:
    """One IMDSv2 read (a fresh session token each time: reads are rare), retried with backoff
    on 429/5xx/401 and connection errors."""
    last: Optional[Exception] = None
    for attempt in range(IMDS_ATTEMPTS):
        try:
            return _imds_once(base, path)
        except urllib.error.HTTPError as exc:
            last = exc
            if exc.code not in IMDS_RETRY_STATUSES:
                break
        except OSError as exc:  # URLError, timeouts, refused connections
            last = exc
        if attempt + 1 < IMDS_ATTEMPTS:
            time.sleep(0.5 * 2**attempt)
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
        self.changed = threading.Condition()
        self.current: Optional[Credentials] = None
        self.expires = 0.0
        self.fetches = 0
        self.fetching = False
        self.last_try = -1e18

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
        path = f"/latest/meta-data/iam/security-credentials/{roles[0]}"
        doc = json.loads(_imds_get(base, path))
        if doc.get("Code", "Success") != "Success":
            raise Failure(f"instance metadata: role credentials: {doc.get('Code')}")
        creds = Credentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token"))
        return creds, _parse_expiration(doc["Expiration"])

    def _usable(self, now: float) -> bool:
        return self.current is not None and now < self.expires - EXPIRY_MARGIN

    def get(self) -> Credentials:
        static = self._from_env()
        if static:
            return static
        with self.changed:
            while True:
                now = self.clock()
                usable = self._usable(now)
                due = now >= self.expires - REFRESH_SECONDS
                if usable and (not due or self.fetching or now - self.last_try < REFRESH_INTERVAL):
                    assert self.current is not None
                    return self.current
                if not self.fetching:
                    break
                self.changed.wait(1.0)  # no valid credentials: wait for the fetching thread
            self.fetching, self.last_try = True, now
        return self._fetch()

    def _fetch(self) -> Credentials:
        """Fetch from IMDS (this thread alone); a failure keeps credentials that are valid."""
        try:
            creds, expires = self._from_imds()
        except Failure:
            with self.changed:
                self.fetching = False
                self.changed.notify_all()
                if self._usable(self.clock()):
                    assert self.current is not None
                    return self.current
            raise
        with self.changed:
            self.current, self.expires = creds, expires
            self.fetches += 1
            self.fetching = False
            self.changed.notify_all()
            return creds

    def refresh(self) -> None:
        """EBS said the session token expired: fetch new credentials at the next ``get()``."""
        with self.changed:
            self.expires = min(self.expires, self.clock())
            self.last_try = -1e18


def region(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    found = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    return found or _imds_get(_imds_base(env), "/latest/meta-data/placement/region").strip()


def dns_suffix(region_name: str, env: Optional[Mapping[str, str]] = None) -> str:
    """The partition's DNS suffix: on the instance (no region in the environment) IMDS's
    services/domain, else by the Region's prefix (botocore's endpoints.json partitions)."""
    env = os.environ if env is None else env
    if not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        return _imds_get(_imds_base(env), "/latest/meta-data/services/domain").strip()
    for prefix, suffix in DNS_SUFFIXES:
        if region_name.startswith(prefix):
            return suffix
    return "amazonaws.com"


def endpoint(region_name: str, env: Optional[Mapping[str, str]] = None) -> str:
    """AWS_ENDPOINT_URL_EBS, else botocore's rule for ebs: https://ebs.REGION.SUFFIX, or
    ebs-fips.REGION.SUFFIX when AWS_USE_FIPS_ENDPOINT is true."""
    env = os.environ if env is None else env
    override = env.get("AWS_ENDPOINT_URL_EBS")
    if override:
        return override
    fips = env.get("AWS_USE_FIPS_ENDPOINT", "").strip().lower() == "true"
    return f"https://ebs{'-fips' if fips else ''}.{region_name}.{dns_suffix(region_name, env)}"
