"""The multipart uploads left unfinished under a prefix (ListMultipartUploads), so a rerun
can name what a killed dump left: stored and billed, yet invisible to a listing of
objects. obstore (object_store) has no call for it, so this is one GET signed with AWS
Signature Version 4 by hand, with the same settings. Best effort: None when it cannot
tell (credentials only the SDKs find, a server without the call, no answer)."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgblobdump.storage.s3config import S3Settings

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class Upload:
    key: str
    upload_id: str
    initiated: str


def _quote(text: str) -> str:
    """URI-encode as SigV4 wants: everything but A-Z a-z 0-9 - _ . ~"""
    return urllib.parse.quote(text, safe="-_.~")


def unfinished_uploads(
    settings: S3Settings, bucket: str, prefix: str, timeout: float = 10.0
) -> list[Upload] | None:
    """The uploads under ``prefix`` (a key prefix: ``lobs/``) not completed nor aborted,
    up to 1,000; None when they cannot be listed."""
    s = settings
    if not (s.access_key_id and s.secret_access_key):
        return None
    if s.endpoint:  # path-style, as the store is addressed
        base = urllib.parse.urlsplit(s.endpoint)
        scheme, host = base.scheme, base.netloc
        path = f"{base.path.rstrip('/')}/{_quote(bucket)}/"
    else:
        scheme, host, path = "https", f"s3.{s.region}.amazonaws.com", f"/{_quote(bucket)}/"
    query = f"prefix={_quote(prefix)}&uploads="  # sorted by name, as signed
    now = dt.datetime.now(dt.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if s.session_token:
        headers["x-amz-security-token"] = s.session_token
    names = ";".join(sorted(headers))
    canonical = "\n".join(
        ["GET", path, query, *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names,
         EMPTY_SHA256]
    )  # fmt: skip
    scope = f"{day}/{s.region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{s.secret_access_key}".encode()
    for part in (day, s.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={s.access_key_id}/{scope}, SignedHeaders={names},"
        f" Signature={signature}"
    )
    request = urllib.request.Request(f"{scheme}://{host}{path}?{query}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        root = ET.fromstring(body)
    except (OSError, ET.ParseError):  # urllib's errors are OSErrors
        return None
    return [
        Upload(u.findtext(f"{NS}Key") or "", u.findtext(f"{NS}UploadId") or "",
               u.findtext(f"{NS}Initiated") or "")
        for u in root.iter(f"{NS}Upload")
    ]  # fmt: skip
