"""`ebs-compactor`: start, follow and report compactions and batches (docs/client.md).

Exit codes (EXIT_CODES; docs/client.md lists them):
0 the execution succeeded with a good outcome (success, estimated; a batch: succeeded) or,
  without --wait, it was started / the command answered;
1 the execution FAILED; 2 bad usage or input (nothing started); 3 TIMED_OUT; 4 ABORTED;
5 an AWS call of the client failed (credentials, permissions, parameter not found);
6 the execution SUCCEEDED but its outcome is not good (a batch with failed items: partial/failed,
  or a report outcome `failure`); 7 --timeout passed while the execution still runs; 130 Ctrl-C
  stopped the wait (the execution goes on); 8 SUCCEEDED with outcome succeeded-with-warnings:
  everything the input asked for exists, but something that is not a deliverable failed (fast
  snapshot restore, the report, the teardown).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from botocore.exceptions import BotoCoreError

from . import inputs
from .api import NOT_YET_READABLE, Api, ClientFailure, Waiter, output_of
from .progress import (
    BATCH_SUCCESS_OUTCOMES,
    SUCCESS_OUTCOMES,
    WARNINGS_OUTCOME,
    Progress,
    format_copy,
    outcome_of,
    summary_line,
)

EXIT_CODES = {
    "SUCCEEDED": 0,
    "FAILED": 1,
    "USAGE": 2,
    "TIMED_OUT": 3,
    "ABORTED": 4,
    "AWS": 5,
    "BAD_OUTCOME": 6,
    "WAIT_TIMEOUT": 7,
    "WARNINGS": 8,
    "INTERRUPTED": 130,
}
STACK_ENV = "EBS_COMPACTOR_STACK"


class Ctx:
    def __init__(self, stack: str | None, region: str | None, profile: str | None) -> None:
        self.stack, self.region, self.profile = stack, region, profile
        self._api: Api | None = None

    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = Api.create(self.region, self.profile)
        return self._api


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--stack",
    envvar=STACK_ENV,
    show_envvar=True,
    help="The deployed stack's name (finds its state machines in SSM).",
)
@click.option("--region", envvar="AWS_REGION", help="AWS Region (default: the SDK's).")
# No envvar=AWS_PROFILE: the SDK reads it itself, after access keys in the environment; passing it
# as profile_name would outrank them and run as another identity than boto3 and the AWS CLI.
@click.option("--profile", help="AWS profile (default: the SDK's credential chain).")
@click.version_option(package_name="ebs-compactor-client")
@click.pass_context
def cli(ctx: click.Context, stack: str | None, region: str | None, profile: str | None) -> None:
    """Start, follow and report ebs-snapshot-compactor executions and batches."""
    ctx.obj = Ctx(stack, region, profile)


def wait_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        help="With --wait: stop waiting after this many seconds (exit 7).",
    )(f)
    f = click.option(
        "--poll-seconds",
        type=click.FloatRange(min=0.05),
        default=5.0,
        show_default=True,
        help="With --wait: seconds between polls.",
    )(f)
    f = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the execution output (the report) as JSON on stdout.",
    )(f)
    f = click.option("--wait", is_flag=True, help="Follow the execution until it ends.")(f)
    f = click.option("--state-machine-arn", help="Use this state machine instead of --stack's.")(f)
    f = click.option(
        "--name", help="The execution name (idempotent: the same name and input start nothing new)."
    )(f)
    return f


def option_flags(tag_flag: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The execution-input options (start; batch, where --tag is the selector's and the output
    tags are --output-tag)."""
    return lambda f: _option_flags(f, tag_flag)


def _option_flags(f: Callable[..., Any], tag_flag: str) -> Callable[..., Any]:
    for decorator in reversed(
        [
            click.option("--method", type=click.Choice(["allocated", "trim"])),
            click.option("--jobs", type=click.IntRange(1, 64), help="Parallel copy jobs."),
            click.option(
                "--verify/--no-verify", default=None, help="fsck and compare (default on)."
            ),
            click.option("--kms-key", help="Encrypt the targets with this KMS key."),
            click.option(
                tag_flag, "tags", multiple=True, metavar="K=V", help="Extra tag on the outputs."
            ),
            click.option(
                "--fsr-az",
                "fsr_azs",
                multiple=True,
                metavar="AZ",
                help="Enable fast snapshot restore in this AZ (repeatable).",
            ),
            click.option("--dry-run", is_flag=True, help="Estimate only: copy nothing."),
            click.option(
                "--copy-sharing",
                is_flag=True,
                help="AMI: give the new AMI the source's launch permissions.",
            ),
        ]
    ):
        f = decorator(f)
    return f


@cli.command()
@click.option("--snapshot", help="The snapshot to compact (id or ARN).")
@click.option("--image", help="The AMI to compact.")
@click.option("--image-name", help="The new AMI's name (with --image).")
@option_flags("--tag")
@wait_options
@click.pass_obj
def start(
    obj: Ctx, /, snapshot: str | None, image: str | None, image_name: str | None, **flags: Any
) -> None:
    """Start one compaction (of a snapshot or an AMI)."""
    run = _split(flags)
    document = _checked(
        lambda: inputs.execution_input(snapshot, image, image_name, inputs.options(**flags))
    )
    _start_and_follow(obj, "main", document, run, good=SUCCESS_OUTCOMES)


def batch_flags(f: Callable[..., Any]) -> Callable[..., Any]:
    """What a batch compacts (items or a selector) and how (concurrency, tolerance)."""
    for decorator in reversed(
        [
            click.option(
                "--items",
                "items_file",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help='A JSON list of items ({"snapshotId"}/{"imageId"} or ids) or one id a line.',
            ),
            click.option("--snapshot", "snapshots", multiple=True, help="A snapshot (repeatable)."),
            click.option("--image", "images", multiple=True, help="An AMI (repeatable)."),
            click.option(
                "--tag",
                "select_tag",
                metavar="K[=V]",
                help="Selector: this account's resources with this tag (any value without =V).",
            ),
            click.option("--created-before", help="Selector: created before (ISO 8601 with Z)."),
            click.option("--min-size-gib", type=click.IntRange(min=1), help="Selector: min size."),
            click.option(
                "--resource-type",
                "resource_types",
                multiple=True,
                type=click.Choice(["snapshot", "image"]),
                help="Selector: what to select (repeatable; default snapshot).",
            ),
            click.option(
                "--include-compacted",
                is_flag=True,
                help="Selector: also sources that already have a delivered compacted copy.",
            ),
            click.option(
                "--min-savings-percent",
                type=click.FloatRange(0, 100),
                help="Estimate each item first; compact those predicted to save this much.",
            ),
            click.option("--max-concurrency", type=click.IntRange(min=1), help="Items at once."),
            click.option(
                "--tolerated-failure-percentage",
                type=click.FloatRange(0, 100),
                help="Fail the batch when more than this percent of items failed (default 100).",
            ),
        ]
    ):
        f = decorator(f)
    return f


@cli.command()
@batch_flags
@option_flags("--output-tag")
@wait_options
@click.pass_obj
def batch(obj: Ctx, /, **flags: Any) -> None:
    """Start a batch: explicit items or a selector, one child compaction per item."""
    run = _split(flags)
    _start_and_follow(
        obj, "batch", _checked(lambda: _batch_input(flags)), run, good=BATCH_SUCCESS_OUTCOMES
    )


def _batch_input(flags: dict[str, Any]) -> dict[str, Any]:
    """The batch input from the flags (the batch's own ones taken out, the rest are options)."""
    items_file = flags.pop("items_file")
    items = inputs.items_from_file(items_file) if items_file else []
    items += [{"snapshotId": s} for s in flags.pop("snapshots")]
    items += [{"imageId": i} for i in flags.pop("images")]
    selector = inputs.selector(
        flags.pop("select_tag"),
        flags.pop("created_before"),
        flags.pop("min_size_gib"),
        flags.pop("resource_types"),
        flags.pop("include_compacted"),
    )
    return inputs.batch_input(
        items=items,
        selector=selector,
        min_savings_percent=flags.pop("min_savings_percent"),
        max_concurrency=flags.pop("max_concurrency"),
        tolerated_failure_percentage=flags.pop("tolerated_failure_percentage"),
        opts=inputs.options(**flags),
    )


@cli.command()
@click.argument("execution_arn")
@click.option("--json", "as_json", is_flag=True, help="Print DescribeExecution's answer as JSON.")
@click.pass_obj
def status(obj: Ctx, execution_arn: str, as_json: bool) -> None:
    """Show an execution's status, phase and copy progress (exit code as for --wait)."""
    described = _aws(lambda: obj.api.describe(execution_arn))
    if as_json:
        click.echo(json.dumps(described, default=str, indent=1))
    else:
        progress = Progress()
        progress.apply(_aws(lambda: obj.api.all_events(execution_arn)))
        _attempt_progress(obj.api, progress)
        click.echo(f"execution: {execution_arn}")
        if described["status"] == "RUNNING" and progress.phase:
            click.echo(f"phase: {progress.phase}")
        if described["status"] == "RUNNING" and progress.copy:
            click.echo(format_copy(progress.copy))
        click.echo(_summary(described))
    if described["status"] != "RUNNING":
        sys.exit(_exit_code(described, SUCCESS_OUTCOMES + BATCH_SUCCESS_OUTCOMES))


@cli.command()
@click.argument("execution_arn")
@click.pass_obj
def report(obj: Ctx, execution_arn: str) -> None:
    """Print an execution's report (its output; a failed run's from its Report state)."""
    described = _aws(lambda: obj.api.describe(execution_arn))
    output = output_of(described)
    if output is None:
        output = _report_from_history(_aws(lambda: obj.api.all_events(execution_arn)))
    if output is None:
        _fail(f"{execution_arn} is {described['status']} and has no report yet", "AWS")
    click.echo(json.dumps(output, indent=1, sort_keys=True))


def _attempt_progress(api: Api, progress: Progress) -> None:
    """The running launch attempt's phase and copy (its own history), if it is readable yet."""
    if progress.attempt_arn is None:
        return
    try:
        api.attempt_lines(progress, progress.attempt_arn)
    except ClientFailure as failure:
        if failure.code not in NOT_YET_READABLE:
            _fail(str(failure), "AWS")


def _report_from_history(events: list[dict[str, Any]]) -> Any:
    """The last state output holding a report (a failed run reports before its Fail state)."""
    for event in reversed(events):
        text = event.get("stateExitedEventDetails", {}).get("output")
        if not text:
            continue
        state = json.loads(text)
        if isinstance(state, dict) and isinstance(state.get("report"), dict):
            return state["report"]
    return None


# --- shared -------------------------------------------------------------------------------------


def _split(flags: dict[str, Any]) -> dict[str, Any]:
    """Take the run flags (--name, --wait, ...) out of flags; the rest are input options."""
    keys = ("name", "state_machine_arn", "wait", "as_json", "poll_seconds", "timeout")
    run = {k: flags.pop(k) for k in keys}
    _checked(lambda: inputs.check_name(run["name"]))
    return run


def _checked(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except (inputs.InputError, OSError) as error:
        _fail(str(error), "USAGE")


def _aws(call: Callable[[], Any]) -> Any:
    """The call's answer; an AWS failure (an API error, no Region, no credentials, no
    connection) exits 5 with the SDK's message."""
    try:
        return call()
    except (ClientFailure, BotoCoreError) as error:
        _fail(str(error), "AWS")


def _fail(message: str, code: str) -> None:
    click.echo(f"ebs-compactor: {message}", err=True)
    sys.exit(EXIT_CODES[code])


def _start_and_follow(
    obj: Ctx, kind: str, document: dict[str, Any], run: dict[str, Any], good: tuple[str, ...]
) -> None:
    arn = _aws(lambda: obj.api.state_machine_arn(obj.stack, run["state_machine_arn"], kind))
    started = _aws(lambda: obj.api.start(arn, document, run["name"]))
    execution_arn = started["executionArn"]
    click.echo(f"started: {execution_arn}", err=run["as_json"])
    if not run["wait"]:
        if run["as_json"]:
            click.echo(json.dumps({"executionArn": execution_arn, "input": document}))
        return
    waiter = Waiter(
        obj.api,
        execution_arn,
        interval=run["poll_seconds"],
        timeout=run["timeout"],
        batch=kind == "batch",
    )
    try:
        described = _aws(waiter.wait)
    except TimeoutError:
        _fail(f"still RUNNING after {run['timeout']:.0f} s: {execution_arn}", "WAIT_TIMEOUT")
    except KeyboardInterrupt:  # Ctrl-C stops the wait, not the execution
        _fail(f"stopped waiting; the execution goes on: {execution_arn}", "INTERRUPTED")
    if run["as_json"] and described.get("output"):
        click.echo(json.dumps(output_of(described), indent=1, sort_keys=True))
    click.echo(_summary(described), err=run["as_json"])
    sys.exit(_exit_code(described, good))


def _summary(described: dict[str, Any]) -> str:
    return summary_line(
        described["status"], output_of(described), described.get("error"), described.get("cause")
    )


def _exit_code(described: dict[str, Any], good_outcomes: tuple[str, ...]) -> int:
    status = described["status"]
    if status != "SUCCEEDED":
        return EXIT_CODES.get(status, EXIT_CODES["FAILED"])
    outcome = outcome_of(output_of(described))
    if outcome == WARNINGS_OUTCOME:
        return EXIT_CODES["WARNINGS"]
    return (
        EXIT_CODES["SUCCEEDED"] if outcome in (None, *good_outcomes) else EXIT_CODES["BAD_OUTCOME"]
    )


def main() -> None:
    cli(prog_name="ebs-compactor")
