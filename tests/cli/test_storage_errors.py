"""Storage failures as training code sees them, told from the user's own mistakes.

The exception classes and messages are those of the clients' sources: fsspec
(fsspec/exceptions.py), botocore (exceptions.py and the `ClientError` template "An error
occurred (%s) when calling the %s operation%s: %s"), s3fs's errno translation, aiobotocore,
google-api-core (exceptions.py, retry), gcsfs (retry.py), s3torchconnector's mountpoint client
and boto3's transfer retries. A throttled, timed-out or failing store is the cluster's
(storage.io); a missing key or a wrong path is the program's, a refused credential the job's
configuration (startup.config: the user's too).
"""

from __future__ import annotations

import pytest

from whyjob.cli.pasted import diagnose_text
from whyjob.collector.ingest.base import IngestOptions
from whyjob.explain.ruleset import load_rules

STORAGE = [
    "fsspec.exceptions.FSTimeoutError",
    'botocore.exceptions.ReadTimeoutError: Read timeout on endpoint URL: "https://data.s3.us-east-1.amazonaws.com/shards/train-000123.tar"',
    "botocore.exceptions.IncompleteReadError: 1048576 read, but total bytes expected is 4194304.",
    'botocore.exceptions.ConnectionClosedError: Connection was closed before we received a valid response from endpoint URL: "https://data.s3.amazonaws.com/part-0007.parquet".',
    "botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the GetObject operation (reached max retries: 4): Please reduce your request rate.",
    "botocore.exceptions.ClientError: An error occurred (503) when calling the HeadObject operation (reached max retries: 4): Service Unavailable",
    "botocore.exceptions.ClientError: An error occurred (InternalError) when calling the PutObject operation (reached max retries: 4): We encountered an internal error. Please try again.",
    "OSError: [Errno 16] Please reduce your request rate.",
    "google.api_core.exceptions.RetryError: Timeout of 120.0s exceeded, last exception: 503 GET https://storage.googleapis.com/storage/v1/b/data/o/x: Service Unavailable",
    "s3torchconnectorclient._mountpoint_s3_client.S3Exception: Client error: Request throttled",
    "boto3.exceptions.RetriesExceededError: Max Retries Exceeded",
    "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='storage.googleapis.com', port=443): Read timed out. (read timeout=60)",
]
USER = [
    "botocore.errorfactory.NoSuchKey: An error occurred (NoSuchKey) when calling the GetObject operation: The specified key does not exist.",
    "google.api_core.exceptions.NotFound: 404 GET https://storage.googleapis.com/download/storage/v1/b/data/o/missing.tar?alt=media: No such object: data/missing.tar",
]


def _traceback(last: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 180, in main\n'
        "    batch = next(loader_iter)\n"
        '  File "/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 631, in __next__\n'
        "    data = self._next_data()\n"
        f"{last}\n"
    )


@pytest.mark.parametrize("last", STORAGE)
def test_a_failing_store_is_storage(last: str) -> None:
    found = diagnose_text(_traceback(last), load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert found.category == "storage.io", found.summary


CREDENTIALS = [
    "botocore.exceptions.ClientError: An error occurred (403) when calling the HeadObject operation: Forbidden",
    "botocore.exceptions.NoCredentialsError: Unable to locate credentials",
    "botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the GetObject operation: Access Denied",
]


@pytest.mark.parametrize("last", USER)
def test_a_wrong_key_or_path_is_the_program(last: str) -> None:
    found = diagnose_text(_traceback(last), load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert (found.category, found.owner) == ("app.exception", "user"), found.summary


@pytest.mark.parametrize("last", CREDENTIALS)
def test_a_refused_credential_is_the_jobs_configuration(last: str) -> None:
    found = diagnose_text(_traceback(last), load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert (found.category, found.owner) == ("startup.config", "user"), found.summary
    assert found.summary.startswith("The job's credentials were refused"), found.summary
