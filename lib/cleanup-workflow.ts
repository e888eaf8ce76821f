import { Duration } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { PollLoopSettings, Settings } from './settings';
import { longestWorkflowTaskTimeout } from './task-functions';
import { ErrorRoute, POLL_LOOPS, WorkflowBuilder } from './workflow-building-blocks';

/** Margin past the longest task: its Lambda call ends by then, and tag-filtered Describe* calls have caught up. */
export const CLEANUP_MARGIN = Duration.seconds(60);

/** The wait before the cleanup's first teardown: the longest main-workflow task timeout + the margin. */
export function cleanupWaitSeconds(): number {
  return longestWorkflowTaskTimeout().toSeconds() + CLEANUP_MARGIN.toSeconds();
}

/** The wait, every call to its bound with a Lambda timeout each, and an hour for retries and throttling. */
function cleanupBudgetSeconds(bound: PollLoopSettings): number {
  return (
    cleanupWaitSeconds() +
    bound.maxAttempts * (bound.intervalSeconds + longestWorkflowTaskTimeout().toSeconds()) +
    3600
  );
}

export interface CleanupWorkflowProps {
  readonly settings: Settings;
  readonly teardownFunction: lambda.IFunction;
  readonly logGroup: logs.ILogGroup;
}

/**
 * Started by the cleanup rule when a main execution ends FAILED, TIMED_OUT or ABORTED without its own
 * teardown. Input `{"executionName", "executionArn", "status"}`. It waits until no task Lambda of that
 * execution can still be running (a launch in flight would otherwise land its instance after the
 * cleanup), then calls teardown with outcome `cleanup` until nothing tagged with the execution remains
 * (bounded: TeardownIncomplete). Delivered snapshots and their AMIs are kept by teardown itself.
 */
export class CleanupWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;

  constructor(scope: Construct, id: string, props: CleanupWorkflowProps) {
    super(scope, id);
    const failed = new sfn.Fail(this, 'Cleanup failed', {
      errorPath: '$.error.Error',
      causePath: '$.error.Cause',
    });
    const onError: ErrorRoute = { next: failed, resultPath: '$.error' };
    const wait = new sfn.Wait(this, 'Wait past the longest task', {
      comment: 'Longest task Lambda timeout of the main workflow + 60 s (contract/tasks.json timeoutSeconds)',
      time: sfn.WaitTime.duration(Duration.seconds(cleanupWaitSeconds())),
    });
    const definition = this.startState()
      .next(wait)
      .next(this.teardownLoop(props, onError))
      .next(new sfn.Succeed(this, 'Cleaned up', { outputPath: '$.teardown' }));

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      timeout: Duration.seconds(cleanupBudgetSeconds(props.settings.teardownPoll)),
      tracingEnabled: true,
      logs: { destination: props.logGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
    });
  }

  private startState(): sfn.Pass {
    return new sfn.Pass(this, 'Start', {
      comment: 'The ended execution and the poll counters the teardown loop keeps',
      parameters: {
        executionName: sfn.JsonPath.stringAt('$.executionName'),
        executionArn: sfn.JsonPath.stringAt('$.executionArn'),
        status: sfn.JsonPath.stringAt('$.status'),
        polls: Object.fromEntries(POLL_LOOPS.map((loop) => [loop, 0])),
      },
    });
  }

  /** Teardown with outcome `cleanup` until nothing tagged with the ended execution remains. */
  private teardownLoop(props: CleanupWorkflowProps, onError: ErrorRoute): sfn.Chain {
    const b = new WorkflowBuilder(this, 'cleanup', { teardown: props.teardownFunction });
    return b.teardownLoop(
      'Cleanup teardown',
      props.settings.teardownPoll,
      onError,
      'Resources tagged with the ended execution remain after the cleanup; delete them by hand ' +
        '(tag ebs-snapshot-compactor:execution = the execution name).',
    );
  }
}
