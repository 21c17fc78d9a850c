"""Whether the lake's object store honours conditional PUTs, on which its commits rest. The project's log store for
object storage (resources/java/ConditionalPutLogStore.java) creates a version's log entry with `If-None-Match: *`, so
that of two drivers committing the same version one is refused; a server that ignores the header accepts both, and
the later replaces the earlier: a commit lost, silently.

Checked before a process's first Spark session on a lake on object storage (resources/spark.py), once per process
(the verdict is kept): a sentinel object of its own under the lake is PUT twice with `If-None-Match: *`, and the second
must be refused with 412; then deleted. A server that accepts it is refused in one line naming it (AWS_ENDPOINT_URL).

Spoken in plain HTTP signed with AWS Signature Version 4: pyarrow's S3 file system, the project's other S3 client,
sends no conditional header. The keys are the standard AWS variables' (as S3A's and pyarrow's), never logged."""

import hashlib
import hmac
import os
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import quote, urlparse

from resources.storage import OBJECT_STORE_SCHEME, StorageError, join, on_object_store

PRECONDITION_FAILED = 412
CONFLICT = 409  # S3's ConditionalRequestConflict: another conditional write of the key was under way; retry
SENTINEL_FOLDER = ("warehouse", "_conditional_put_check")
TIMEOUT_S = 30


class ConditionalPutsIgnored(StorageError):
    """The object store accepted a PUT with `If-None-Match: *` of an object that exists."""


@dataclass(frozen=True)
class Store:
    """Where the sentinel goes, and who signs for it."""

    endpoint: str  # AWS_ENDPOINT_URL, or "" for AWS S3 itself
    region: str
    access_key: str
    secret_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)

    def url(self, bucket: str, key: str) -> str:
        if self.endpoint:  # path-style, as S3A is set to for such a server (resources/spark.py)
            return f"{self.endpoint.rstrip('/')}/{bucket}/{quote(key, safe='/-_.~')}"
        return f"https://{bucket}.s3.{self.region}.amazonaws.com/{quote(key, safe='/-_.~')}"

    @property
    def named(self) -> str:
        return self.endpoint or f"AWS S3 ({self.region})"


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed(
    store: Store, method: str, url: str, body: bytes = b"", unsigned: dict | None = None
) -> urllib.request.Request:
    """A request to S3 signed with AWS Signature Version 4, plus `unsigned` headers outside the signature: a proxy in
    between may drop them, and what is checked is how the server answers what reaches it."""
    now = datetime.now(UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parsed = urlparse(url)
    headers = {"host": parsed.netloc, "x-amz-content-sha256": hashlib.sha256(body).hexdigest(), "x-amz-date": stamp}
    if store.session_token:
        headers["x-amz-security-token"] = store.session_token
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        [method, parsed.path or "/", parsed.query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names]
    )
    canonical += "\n" + headers["x-amz-content-sha256"]
    scope = f"{day}/{store.region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{store.secret_key}".encode(), day), store.region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={store.access_key}/{scope}, SignedHeaders={names}, Signature={signature}"
    )
    # A content type of its own: urllib's default for a body (a form's) has servers parse the body as form fields.
    typed = {"content-type": "application/octet-stream"} if body else {}
    return urllib.request.Request(
        url, data=body or None, method=method, headers={**headers, **typed, **(unsigned or {})}
    )


def _status(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310  the lake's own endpoint
            return answer.status
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code


def _put_if_absent(store: Store, url: str) -> int:
    """The server's status for a PUT of `url` if no object is there; a conflict with another such PUT retried."""
    for _ in range(3):
        status = _status(signed(store, "PUT", url, b"sentinel\n", unsigned={"If-None-Match": "*"}))
        if status != CONFLICT:
            return status
    return status


def check(store: Store, bucket: str, key: str) -> None:
    """A sentinel at `key` PUT twice with If-None-Match: *: the first made, the second refused with 412, or a
    StorageError naming the server."""
    url = store.url(bucket, key)
    try:
        first = _put_if_absent(store, url)
        if first not in (200, 201):
            raise StorageError(
                f"object storage at {store.named} answered HTTP {first} to a PUT of s3a://{bucket}/{key} (check "
                "AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            )
        second = _put_if_absent(store, url)
        _status(signed(store, "DELETE", url))
    except OSError as unreachable:
        raise StorageError(f"object storage at {store.named} did not answer: {unreachable}") from None
    if second != PRECONDITION_FAILED:
        raise ConditionalPutsIgnored(
            f"object storage at {store.named} does not honour conditional PUTs: it answered HTTP {second}, not 412, "
            f"to a PUT with If-None-Match: * of s3a://{bucket}/{key}, which existed; two drivers committing one "
            "version of a table would both succeed and the later replace the earlier. Use a server that honours "
            "If-None-Match (AWS S3 does, and the s3proxy scripts/object-store.sh runs)"
        )


@lru_cache(maxsize=8)
def _checked(store: Store, bucket: str, prefix: str) -> None:
    """`check`, once per process for each store and lake (its keys among the cache's: other keys are checked again)."""
    check(store, bucket, join(prefix, *SENTINEL_FOLDER, uuid.uuid4().hex).strip("/"))


def ensure_honoured(lake_root: str) -> None:
    """For a lake on object storage, that its server honours conditional PUTs: checked once per process."""
    if not on_object_store(lake_root):
        return
    bucket, _, prefix = lake_root[len(OBJECT_STORE_SCHEME) :].partition("/")
    store = Store(
        os.environ.get("AWS_ENDPOINT_URL", ""),
        os.environ.get("AWS_REGION") or "us-east-1",
        os.environ.get("AWS_ACCESS_KEY_ID", ""),
        os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        os.environ.get("AWS_SESSION_TOKEN", ""),
    )
    _checked(store, bucket, prefix)
