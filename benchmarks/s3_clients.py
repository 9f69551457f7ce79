"""obstore vs boto3 on a local SeaweedFS: what chose the S3 client of ``s3://`` archives.

Each client runs in a child process of its own (peak RSS is per process): a 256 MiB
multipart upload in 8 MiB parts, the same read back as 32 ranged GETs of 8 MiB, and 500
ranged GETs of 4 KiB (what ``cat`` and the index reads look like). boto3 is not a
dependency of pgblobdump: ``pip install boto3`` to run its half.

Usage: .venv/bin/python benchmarks/s3_clients.py [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from pgblobdump.servers.seaweed import ACCESS_KEY, BUCKET, SECRET_KEY, LocalS3

PART = 8 << 20
PARTS = 32


def child(which: str, endpoint: str) -> None:
    data = os.urandom(PART)
    key = f"clients-{which}-{time.time_ns()}"
    if which == "boto3":
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )  # fmt: skip
        t = time.perf_counter()
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=key)
        parts = []
        for i in range(PARTS):
            r = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=up["UploadId"],
                               PartNumber=i + 1, Body=data)  # fmt: skip
            parts.append({"PartNumber": i + 1, "ETag": r["ETag"]})
        s3.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=up["UploadId"],
                                     MultipartUpload={"Parts": parts})  # fmt: skip
        up_s = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(PARTS):
            rng = f"bytes={i * PART}-{(i + 1) * PART - 1}"
            assert len(s3.get_object(Bucket=BUCKET, Key=key, Range=rng)["Body"].read()) == PART
        down_s = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(500):
            s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={i * 4096}-{i * 4096 + 4095}")[
                "Body"
            ].read()
        small_s = time.perf_counter() - t
    else:
        import obstore
        from obstore.store import S3Store

        st = S3Store(
            BUCKET, endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
            region="us-east-1", virtual_hosted_style_request=False,
            client_options={"allow_http": True},
        )  # fmt: skip
        t = time.perf_counter()
        with obstore.open_writer(st, key, buffer_size=PART) as w:
            for _ in range(PARTS):
                w.write(data)
        up_s = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(PARTS):
            assert len(obstore.get_range(st, key, start=i * PART, length=PART)) == PART
        down_s = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(500):
            bytes(obstore.get_range(st, key, start=i * 4096, length=4096))
        small_s = time.perf_counter() - t
    mb = PARTS * PART / 1e6
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| {which} | {mb / up_s:.0f} | {mb / down_s:.0f} | {small_s * 1000 / 500:.2f}"
          f" | {rss:.0f} |", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    with LocalS3() as s3:
        print("| client | multipart upload MB/s | 8 MiB ranged GETs MB/s | 4 KiB GET ms"
              " | peak RSS MB |")  # fmt: skip
        print("|---|---:|---:|---:|---:|")
        for _ in range(args.runs):
            for which in ("boto3", "obstore"):
                subprocess.run([sys.executable, __file__, "--child", which, s3.endpoint],
                               check=which == "obstore")  # fmt: skip


if __name__ == "__main__":
    main()
