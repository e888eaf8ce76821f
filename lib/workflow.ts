import { Duration } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { Settings } from './settings';
import { TaskModule } from './task-functions';
import { ErrorRoute, PHASES, POLL_LOOPS, WorkflowBuilder } from './workflow-building-blocks';

export interface CompactionWorkflowProps {
  readonly settings: Settings;
  readonly functions: Record<TaskModule, lambda.IFunction>;
  readonly logGroup: logs.ILogGroup;
}

const $ = (path: string) => sfn.JsonPath.objectAt(path);
/** CDK drops null from Parameters; this intrinsic yields a JSON null at run time. */
const JSON_NULL = sfn.JsonPath.stringToJson('null');
const NO_KEEP = { snapshotIds: [], imageId: JSON_NULL };

/**
 * The compaction workflow of docs/contract.md: prepare → launch → wait until ready → compact → snapshot →
 * [register image] → [fast snapshot restore] → teardown → report, with a relaunch path for lost instances
 * and one failure chain (teardown → report → Fail with the original error) behind every task.
 */
export class CompactionWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;

  constructor(scope: Construct, id: string, props: CompactionWorkflowProps) {
    super(scope, id);
    const { settings, functions: fn } = props;
    const b = new WorkflowBuilder(this);
    const teardownPayload = (outcome: string, keep: object) =>
      sfn.TaskInput.fromObject({ executionName: sfn.JsonPath.executionName, outcome, keep });

    // Failure chain: built first because every task's Catch points at it.
    const fail = new sfn.Fail(this, 'Failed', { errorPath: '$.error.Error', causePath: '$.error.Cause' });
    const failureReport = b.task('Report failure', fn.report, undefined, '$.report', {
      next: fail,
      resultPath: '$.reportError',
    });
    failureReport.next(fail);
    const failureReportPhase = b.markPhase('Failure: report phase', 'report');
    failureReportPhase.next(failureReport);
    const afterFailureTeardown: ErrorRoute = { next: failureReportPhase, resultPath: '$.teardownError' };
    const failureTeardown = b.pollLoop({
      name: 'Teardown after failure',
      counter: 'teardown',
      bound: settings.teardownPoll,
      task: b.task(
        'Teardown after failure',
        fn.teardown,
        teardownPayload('failure', NO_KEEP),
        '$.teardown',
        afterFailureTeardown,
      ),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause:
        'Resources tagged with this execution remain after the failure teardown; delete them by hand.',
      onTimeout: afterFailureTeardown,
      waitFirst: false,
    });
    const failureStart = new sfn.Pass(this, 'Failure', {
      result: sfn.Result.fromString('failure'),
      resultPath: '$.outcome',
    });
    failureStart
      .next(b.markPhase('Failure: teardown phase', 'teardown'))
      .next(failureTeardown)
      .next(failureReportPhase);
    const onError: ErrorRoute = { next: failureStart, resultPath: '$.error' };

    // Main path.
    const start = new sfn.Pass(this, 'Start', {
      comment: 'State layout of docs/contract.md; every timings/polls key exists from here on',
      parameters: {
        input: sfn.JsonPath.entirePayload,
        executionName: sfn.JsonPath.executionName,
        launchAttempt: 1,
        timings: Object.fromEntries([
          ['start', sfn.JsonPath.stateEnteredTime],
          ...PHASES.map((phase) => [phase, JSON_NULL]),
        ]),
        polls: Object.fromEntries(POLL_LOOPS.map((loop) => [loop, 0])),
      },
    });
    const prepare = b.task(
      'Prepare',
      fn.prepare,
      sfn.TaskInput.fromObject({ input: $('$.input'), executionName: sfn.JsonPath.executionName }),
      '$.plan',
      onError,
    );
    const launchPhase = b.markPhase('Launch phase', 'launch');
    const launch = b.task(
      'Launch transfer instance',
      fn.launch,
      sfn.TaskInput.fromObject({
        plan: $('$.plan'),
        launchAttempt: sfn.JsonPath.numberAt('$.launchAttempt'),
      }),
      '$.instance',
      onError,
    );

    // Instance lost while waiting or compacting: tear down, then launch again while attempts remain.
    const relaunch = new sfn.Pass(this, 'Relaunch', {
      comment: 'Fresh state for the next attempt; the lost instance results are dropped',
      parameters: {
        input: $('$.input'),
        executionName: sfn.JsonPath.stringAt('$.executionName'),
        launchAttempt: sfn.JsonPath.mathAdd(sfn.JsonPath.numberAt('$.launchAttempt'), 1),
        timings: $('$.timings'),
        polls: $('$.polls'),
        plan: $('$.plan'),
      },
    });
    relaunch.next(launchPhase);
    const canRelaunch = new sfn.Choice(this, 'Launch again?')
      .when(sfn.Condition.numberLessThan('$.launchAttempt', settings.maxLaunchAttempts), relaunch)
      .otherwise(failureStart);
    const retryTeardown = b.pollLoop({
      name: 'Teardown before relaunch',
      counter: 'teardown',
      bound: settings.teardownPoll,
      task: b.task(
        'Teardown before relaunch',
        fn.teardown,
        teardownPayload('retry', NO_KEEP),
        '$.teardown',
        onError,
      ),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause: 'The lost transfer instance or its volumes were not deleted in time.',
      onTimeout: onError,
      waitFirst: false,
    });
    const instanceLost = b.markPhase('Instance lost: teardown phase', 'teardown');
    instanceLost.next(retryTeardown).next(canRelaunch);
    const catchInstanceLost = [
      { errors: ['InstanceLost'], route: { next: instanceLost, resultPath: '$.error' } },
    ];

    const checkInstance = b.task(
      'Check instance',
      fn.check_instance,
      sfn.TaskInput.fromObject({ plan: $('$.plan'), instance: $('$.instance') }),
      '$.ready',
      onError,
      catchInstanceLost,
    );
    const waitReady = b.pollLoop({
      name: 'Wait until ready',
      counter: 'ready',
      bound: settings.readyPoll,
      task: checkInstance,
      done: sfn.Condition.booleanEquals('$.ready.ready', true),
      timeoutError: 'InstanceNotReady',
      timeoutCause: 'The transfer instance did not become SSM-managed in time; check the subnets reach SSM.',
      onTimeout: onError,
      waitFirst: true,
    });

    const startCompaction = b.task(
      'Start compaction',
      fn.start_compaction,
      sfn.TaskInput.fromObject({ plan: $('$.plan'), instance: $('$.instance'), ready: $('$.ready') }),
      '$.command',
      onError,
    );
    const checkCompaction = b.task(
      'Check compaction',
      fn.check_compaction,
      sfn.TaskInput.fromObject({ instance: $('$.instance'), command: $('$.command') }),
      '$.compaction',
      onError,
      catchInstanceLost,
    );
    const compaction = b.pollLoop({
      name: 'Compaction',
      counter: 'compaction',
      bound: settings.compactionPoll,
      task: checkCompaction,
      done: sfn.Condition.booleanEquals('$.compaction.done', true),
      timeoutError: 'CompactionTimedOut',
      timeoutCause: 'The Command document did not finish within the compaction poll bound.',
      onTimeout: onError,
      waitFirst: true,
    });

    const createSnapshots = b.task(
      'Create snapshots',
      fn.create_snapshots,
      sfn.TaskInput.fromObject({ plan: $('$.plan'), ready: $('$.ready') }),
      '$.snapshots',
      onError,
    );
    const snapshots = b.pollLoop({
      name: 'Snapshots',
      counter: 'snapshot',
      bound: settings.snapshotPoll,
      task: b.task(
        'Check snapshots',
        fn.check_snapshots,
        sfn.TaskInput.fromObject({ snapshots: $('$.snapshots') }),
        '$.snapshots',
        onError,
      ),
      done: sfn.Condition.booleanEquals('$.snapshots.completed', true),
      timeoutError: 'SnapshotTimedOut',
      timeoutCause: 'The new snapshots did not complete within the snapshot poll bound.',
      onTimeout: onError,
      waitFirst: true,
    });

    const registerImage = b
      .markPhase('Register image phase', 'registerImage')
      .next(
        b.task(
          'Register image',
          fn.register_image,
          sfn.TaskInput.fromObject({ plan: $('$.plan'), snapshots: $('$.snapshots') }),
          '$.image',
          onError,
        ),
      );
    const noImage = new sfn.Pass(this, 'No image to register', {
      result: sfn.Result.fromObject({ imageId: null, warnings: [] }),
      resultPath: '$.image',
    });
    const imageChoice = new sfn.Choice(this, 'Source is an AMI?')
      .when(sfn.Condition.stringEquals('$.plan.source.kind', 'image'), registerImage)
      .otherwise(noImage)
      .afterwards();

    const fastSnapshotRestore = b
      .markPhase('Fast snapshot restore phase', 'fastSnapshotRestore')
      .next(
        b.task(
          'Enable fast snapshot restore',
          fn.enable_fast_snapshot_restore,
          sfn.TaskInput.fromObject({ plan: $('$.plan'), snapshots: $('$.snapshots') }),
          '$.fastSnapshotRestore',
          onError,
        ),
      );
    const noFastSnapshotRestore = new sfn.Pass(this, 'No fast snapshot restore', {
      result: sfn.Result.fromObject({ states: [] }),
      resultPath: '$.fastSnapshotRestore',
    });
    const fsrChoice = new sfn.Choice(this, 'Fast snapshot restore wanted?')
      .when(sfn.Condition.isPresent('$.plan.fastSnapshotRestoreAzs[0]'), fastSnapshotRestore)
      .otherwise(noFastSnapshotRestore)
      .afterwards();

    const succeeded = new sfn.Pass(this, 'Success', {
      result: sfn.Result.fromString('success'),
      resultPath: '$.outcome',
    });
    const teardown = b.pollLoop({
      name: 'Teardown',
      counter: 'teardown',
      bound: settings.teardownPoll,
      task: b.task(
        'Teardown',
        fn.teardown,
        teardownPayload('success', {
          snapshotIds: sfn.JsonPath.listAt('$.snapshots.snapshots[*].snapshotId'),
          imageId: sfn.JsonPath.stringAt('$.image.imageId'),
        }),
        '$.teardown',
        onError,
      ),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause: 'The transfer instance or its volumes were not deleted in time.',
      onTimeout: onError,
      waitFirst: false,
    });
    const report = b.task('Report', fn.report, undefined, '$.report', onError);

    const definition = start
      .next(b.markPhase('Prepare phase', 'prepare'))
      .next(prepare)
      .next(launchPhase)
      .next(launch)
      .next(b.markPhase('Wait until ready phase', 'waitReady'))
      .next(waitReady)
      .next(b.markPhase('Compaction phase', 'compaction'))
      .next(startCompaction)
      .next(compaction)
      .next(b.markPhase('Snapshot phase', 'snapshot'))
      .next(createSnapshots)
      .next(snapshots)
      .next(imageChoice);
    imageChoice
      .next(fsrChoice)
      .next(succeeded)
      .next(b.markPhase('Teardown phase', 'teardown'))
      .next(teardown)
      .next(b.markPhase('Report phase', 'report'))
      .next(report)
      .next(new sfn.Succeed(this, 'Done', { outputPath: '$.report' }));

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      timeout: Duration.minutes(settings.stateMachineTimeoutMinutes),
      tracingEnabled: true,
      // Execution data is resource ids, sizes and timings (no secrets) and is what explains a failure.
      logs: { destination: props.logGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
    });
  }
}
