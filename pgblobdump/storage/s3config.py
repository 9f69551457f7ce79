"""Where an S3 archive is and how to reach it: ``s3://bucket/prefix`` parsed, and the
settings read as the AWS CLI reads them (``AWS_*`` variables, then the profile's files),
secrets registered with ``errors.scrub`` so no message can carry them."""

from __future__ import annotations

import configparser
import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pgblobdump.errors import UsageError, register_secret

SCHEME = "s3://"


def is_s3(path: str) -> bool:
    return path.startswith(SCHEME)


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str
    """Without a trailing slash; empty for the bucket's root."""

    @classmethod
    def parse(cls, url: str) -> S3Url:
        rest = url[len(SCHEME) :] if is_s3(url) else ""
        bucket, _, prefix = rest.partition("/")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket):
            raise UsageError(f"{url!r} is not s3://BUCKET/PREFIX (bucket names: 3-63 of a-z0-9.-)")
        return cls(bucket, prefix.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


@dataclass(frozen=True)
class S3Settings:
    endpoint: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None = field(repr=False)
    session_token: str | None = field(repr=False)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> S3Settings:
        """The AWS CLI's variables, then the profile's files for what they leave out."""
        e = dict(os.environ if env is None else env)
        profile = _profile(e)
        endpoint = e.get("AWS_ENDPOINT_URL_S3") or e.get("AWS_ENDPOINT_URL")
        settings = cls(
            endpoint=endpoint or profile.get("endpoint_url"),
            region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION")
            or profile.get("region") or "us-east-1",
            access_key_id=e.get("AWS_ACCESS_KEY_ID") or profile.get("aws_access_key_id"),
            secret_access_key=e.get("AWS_SECRET_ACCESS_KEY")
            or profile.get("aws_secret_access_key"),
            session_token=e.get("AWS_SESSION_TOKEN") or profile.get("aws_session_token"),
        )  # fmt: skip
        register_secret(settings.secret_access_key)
        register_secret(settings.session_token)
        if settings.endpoint and not re.fullmatch(
            r"https?://[A-Za-z0-9.\-\[\]:]+(/\S*)?", settings.endpoint
        ):
            raise UsageError(
                f"S3 endpoint {settings.endpoint!r} is not an http(s):// URL"
                " (AWS_ENDPOINT_URL or --s3-endpoint)"
            )
        return settings


def _profile(env: dict[str, str]) -> dict[str, str]:
    """``AWS_PROFILE``'s (or ``default``'s) keys from ~/.aws/credentials and ~/.aws/config."""
    name = env.get("AWS_PROFILE") or "default"
    home = Path(env.get("HOME") or Path.home())
    out: dict[str, str] = {}
    files = [
        (Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config"),
         name if name == "default" else f"profile {name}"),
        (Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"), name),
    ]  # fmt: skip
    for path, section in files:
        parser = configparser.ConfigParser(interpolation=None)
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(path)
        if parser.has_section(section):
            out.update(parser[section])
    if env.get("AWS_PROFILE") and not out:
        raise UsageError(f"AWS_PROFILE={name}: no such profile in ~/.aws/config or credentials")
    return out
