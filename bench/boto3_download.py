"""A peer for the benchmarks: download every object under a prefix with boto3's transfer manager.

    python bench/boto3_download.py BUCKET PREFIX TARGET [PART_MIB CONCURRENCY]   (endpoint from AWS_ENDPOINT_URL)

Without PART_MIB/CONCURRENCY it runs at boto3's defaults (8 MiB parts, 10 threads).
"""

from __future__ import annotations

import os
import sys

import boto3
from boto3.s3.transfer import TransferConfig
from s3transfer.manager import TransferManager


def main() -> None:
    bucket, prefix, target = sys.argv[1:4]
    config = TransferConfig()
    if len(sys.argv) > 4:
        part = int(sys.argv[4]) * 1024 * 1024
        config = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=int(sys.argv[5]))
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    with TransferManager(client, config) as manager:
        futures = []
        for key in keys:
            path = os.path.join(target, key[len(prefix) :])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            futures.append(manager.download(bucket, key, path))
        for future in futures:
            future.result()


if __name__ == "__main__":
    main()
