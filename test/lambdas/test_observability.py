"""task_handler: throttling or 5xx that outlived botocore's retries becomes TransientAwsError,
which every Task of the state machine retries; any other error passes through unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from compactor.errors import InvalidInput, TransientAwsError
from compactor.observability import task_handler
from support import FakeLambdaContext


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": f"{code} message"},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        "DescribeSnapshots",
    )  # fmt: skip


def _raising(error: Exception) -> Any:
    @task_handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise error

    return handler


@pytest.mark.parametrize(
    ("code", "status"),
    [("RequestLimitExceeded", 503), ("ThrottlingException", 400), ("InternalError", 500)],
)
def test_transient_answers_become_transient_aws_error(code: str, status: int) -> None:
    with pytest.raises(TransientAwsError, match=f"DescribeSnapshots answered {code}"):
        _raising(_client_error(code, status))({}, FakeLambdaContext())


def test_other_client_errors_pass_through() -> None:
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        _raising(_client_error("UnauthorizedOperation", 403))({}, FakeLambdaContext())


def test_expected_failures_pass_through() -> None:
    with pytest.raises(InvalidInput):
        _raising(InvalidInput("bad"))({}, FakeLambdaContext())


def test_results_pass_through() -> None:
    @task_handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"echo": event["x"]}

    assert handler({"x": 1}, FakeLambdaContext()) == {"echo": 1}
