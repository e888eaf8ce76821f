import { Duration } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { PollLoopSettings, Settings } from './settings';
import { WorkflowTaskModule } from './task-functions';
import { ErrorRoute, PHASES, POLL_LOOPS, SpecificCatch, WorkflowBuilder } from './workflow-building-blocks';

export interface CompactionWorkflowProps {
  readonly settings: Settings;
  readonly functions: Record<WorkflowTaskModule, lambda.IFunction>;
  readonly logGroup: logs.ILogGroup;
}

export const $ = (path: string) => sfn.JsonPath.objectAt(path);
/** CDK drops null from Parameters; this intrinsic yields a JSON null at run time. */
export const JSON_NULL = sfn.JsonPath.stringToJson('null');
/** Teardown `keep` when nothing is to be kept. */
export const NO_KEEP = { snapshotIds: [], imageId: JSON_NULL };

/** What every task of the main path after `Delivered` keeps: the new snapshots and the AMI, if any. */
const KEEP_DELIVERED = {
  snapshotIds: sfn.JsonPath.listAt('$.snapshots.snapshots[*].snapshotId'),
  imageId: sfn.JsonPath.stringAt('$.image.imageId'),
};

/** How long a poll loop may run, for the messages of its timeout errors. */
const minutesOf = (bound: PollLoopSettings) => Math.round((bound.maxAttempts * bound.intervalSeconds) / 60);

/** Seconds list_source_blocks lists per call (SLICE_SECONDS of lambdas/compactor/source_blocks.py). */
export const BLOCK_LIST_SLICE_SECONDS = 60;
/** The block-list loop's calls take a slice of listing each besides the wait between them. */
const blockListMinutes = (bound: PollLoopSettings) =>
  Math.round((bound.maxAttempts * (bound.intervalSeconds + BLOCK_LIST_SLICE_SECONDS)) / 60);

function teardownPayload(outcome: 'success' | 'retry' | 'failure', keep: object): sfn.TaskInput {
  return sfn.TaskInput.fromObject({ executionName: sfn.JsonPath.executionName, outcome, keep });
}

/**
 * The compaction workflow of docs/contract.md: prepare (until the sources are completed) → list the source
 * snapshots' blocks → launch → wait
 * until ready → attach volumes → compact → snapshot → Delivered → [register image] → [fast snapshot restore]
 * → teardown → report. Lost instances take the relaunch path. Before `Delivered` every task catches into the
 * failure chain (teardown → report → Fail); from `Delivered` on, into the warnings chain, which keeps the
 * new snapshots and AMI and ends in success with outcome `succeeded-with-warnings`.
 */
export class CompactionWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;
  private readonly b: WorkflowBuilder;
  private readonly settings: Settings;
  private readonly fn: Record<WorkflowTaskModule, lambda.IFunction>;

  constructor(scope: Construct, id: string, props: CompactionWorkflowProps) {
    super(scope, id);
    this.settings = props.settings;
    this.fn = props.functions;
    this.b = new WorkflowBuilder(this);

    // Both chains are built first because the tasks' Catches point at them.
    const onError = this.failureChain();
    const onWarning = this.warningsChain();
    const definition = this.mainPath(onError, onWarning);

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      timeout: Duration.minutes(this.settings.stateMachineTimeoutMinutes),
      tracingEnabled: true,
      // Execution data is resource ids, sizes and timings (no secrets) and is what explains a failure.
      logs: { destination: props.logGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
    });
  }

  /** Before delivery: teardown(`failure`) → report(`failure`) → Fail with the original error. */
  private failureChain(): ErrorRoute {
    const b = this.b;
    const fail = new sfn.Fail(this, 'Failed', { errorPath: '$.error.Error', causePath: '$.error.Cause' });
    const failureReport = b.task('Report failure', this.fn.report, undefined, '$.report', {
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
      bound: this.settings.teardownPoll,
      task: b.task(
        'Teardown after failure',
        this.fn.teardown,
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
    return { next: failureStart, resultPath: '$.error' };
  }

  /**
   * After delivery: outcome `succeeded-with-warnings` with the error at `$.warning` → teardown(`success`:
   * instances and volumes only) → `Report with warnings` → Succeed; a failing report ends in
   * `Report unavailable` (a report made of the state) → Succeed. No path from here deletes a snapshot.
   */
  private warningsChain(): ErrorRoute {
    const b = this.b;
    const done = new sfn.Succeed(this, 'Done with warnings', { outputPath: '$.report' });
    const reportUnavailable = new sfn.Pass(this, 'Report unavailable', {
      comment: 'The report handler failed too: the execution output says what was delivered and both errors',
      parameters: {
        outcome: 'succeeded-with-warnings',
        executionName: sfn.JsonPath.stringAt('$.executionName'),
        newSnapshotIds: sfn.JsonPath.listAt('$.snapshots.snapshots[*].snapshotId'),
        imageId: sfn.JsonPath.stringAt('$.image.imageId'),
        warning: $('$.warning'),
        reportError: $('$.reportError'),
      },
      resultPath: '$.report',
    });
    reportUnavailable.next(done);
    const report = b.task('Report with warnings', this.fn.report, undefined, '$.report', {
      next: reportUnavailable,
      resultPath: '$.reportError',
    });
    report.next(done);
    const reportPhase = b.markPhase('Warnings: report phase', 'report');
    reportPhase.next(report);

    const afterTeardown: ErrorRoute = { next: reportPhase, resultPath: '$.teardownError' };
    const teardown = b.pollLoop({
      name: 'Teardown with warnings',
      counter: 'teardown',
      bound: this.settings.teardownPoll,
      task: b.task(
        'Teardown with warnings',
        this.fn.teardown,
        teardownPayload('success', KEEP_DELIVERED),
        '$.teardown',
        afterTeardown,
      ),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause:
        'The transfer instance or its volumes were not deleted in time; the new snapshots are kept. ' +
        'Delete what is tagged with this execution by hand.',
      onTimeout: afterTeardown,
      waitFirst: false,
    });
    const teardownPhase = b.markPhase('Warnings: teardown phase', 'teardown');
    teardownPhase.next(teardown).next(reportPhase);

    // Register image may be the step that failed: `$.image` must exist for the teardown and the report.
    const noImage = new sfn.Pass(this, 'No image after warning', {
      result: sfn.Result.fromObject({ imageId: null, warnings: [] }),
      resultPath: '$.image',
    });
    noImage.next(teardownPhase);
    const imageKnown = new sfn.Choice(this, 'Image known?')
      .when(sfn.Condition.isPresent('$.image.imageId'), teardownPhase)
      .otherwise(noImage);
    const start = new sfn.Pass(this, 'Delivered with warnings', {
      comment: 'The new snapshots are completed and tagged delivered; a later error only adds a warning',
      result: sfn.Result.fromString('succeeded-with-warnings'),
      resultPath: '$.outcome',
    });
    start.next(imageKnown);
    return { next: start, resultPath: '$.warning' };
  }

  /**
   * Instance lost while waiting, attaching or compacting: teardown(`retry`), then launch again while
   * attempts remain (else the failure chain). Returns the Catch the instance-facing tasks put first.
   */
  private relaunchPath(launchPhase: sfn.IChainable, onError: ErrorRoute): SpecificCatch[] {
    const b = this.b;
    const relaunch = new sfn.Pass(this, 'Relaunch', {
      comment: 'Fresh state for the next attempt; the lost instance results are dropped',
      parameters: {
        input: $('$.input'),
        executionName: sfn.JsonPath.stringAt('$.executionName'),
        launchAttempt: sfn.JsonPath.mathAdd(sfn.JsonPath.numberAt('$.launchAttempt'), 1),
        timings: $('$.timings'),
        polls: $('$.polls'),
        plan: $('$.plan'),
        // the block lists stay valid: the next attempt's command reads the same bundle
        sourceBlocks: $('$.sourceBlocks'),
      },
    });
    relaunch.next(launchPhase);
    const canRelaunch = new sfn.Choice(this, 'Launch again?')
      .when(sfn.Condition.numberLessThan('$.launchAttempt', this.settings.maxLaunchAttempts), relaunch)
      .otherwise(onError.next);
    const retryTeardown = b.pollLoop({
      name: 'Teardown before relaunch',
      counter: 'teardown',
      bound: this.settings.teardownPoll,
      task: b.task(
        'Teardown before relaunch',
        this.fn.teardown,
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
    return [{ errors: ['InstanceLost'], route: { next: instanceLost, resultPath: '$.error' } }];
  }

  private startState(): sfn.Pass {
    return new sfn.Pass(this, 'Start', {
      comment: 'State layout of docs/contract.md; every timings/polls key exists from here on',
      parameters: {
        input: sfn.JsonPath.entirePayload,
        executionName: sfn.JsonPath.executionName,
        launchAttempt: 1,
        sourceBlocks: JSON_NULL,
        timings: Object.fromEntries([
          ['start', sfn.JsonPath.stateEnteredTime],
          ...PHASES.map((phase) => [phase, JSON_NULL]),
        ]),
        polls: Object.fromEntries(POLL_LOOPS.map((loop) => [loop, 0])),
      },
    });
  }

  /** Prepare, called until every source snapshot is `completed` (the plan says so). */
  private sourcesLoop(onError: ErrorRoute): sfn.Chain {
    const bound = this.settings.sourcePoll;
    return this.b.pollLoop({
      name: 'Wait for source snapshots',
      counter: 'sources',
      bound,
      task: this.b.task(
        'Prepare',
        this.fn.prepare,
        sfn.TaskInput.fromObject({ input: $('$.input'), executionName: sfn.JsonPath.executionName }),
        '$.plan',
        onError,
      ),
      done: sfn.Condition.booleanEquals('$.plan.sourcesReady', true),
      timeoutError: 'SnapshotNotCompleted',
      timeoutCause: sfn.JsonPath.format(
        `Source snapshots still pending after ${minutesOf(bound)} minutes - {} - ` +
          'wait until they are completed and start again or raise sourcePollMaxAttempts.',
        sfn.JsonPath.jsonToString($('$.plan.pendingSnapshotIds')),
      ),
      onTimeout: onError,
      waitFirst: false,
    });
  }

  /** List the blocks each source snapshot holds into the stack's bucket, a minute of listing per call. */
  private blockListLoop(onError: ErrorRoute): sfn.Chain {
    const bound = this.settings.blockListPoll;
    return this.b.pollLoop({
      name: 'List source blocks',
      counter: 'blocks',
      bound,
      task: this.b.task(
        'List source blocks',
        this.fn.list_source_blocks,
        sfn.TaskInput.fromObject({ plan: $('$.plan'), sourceBlocks: $('$.sourceBlocks') }),
        '$.sourceBlocks',
        onError,
      ),
      done: sfn.Condition.booleanEquals('$.sourceBlocks.complete', true),
      timeoutError: 'BlockListIncomplete',
      timeoutCause: sfn.JsonPath.format(
        `The source snapshots' blocks were not all listed in ${bound.maxAttempts} calls (about ` +
          `${blockListMinutes(bound)} minutes; {} pages read) - ` +
          'raise blockListPollMaxAttempts, or check ListSnapshotBlocks throttling in the account.',
        sfn.JsonPath.jsonToString($('$.sourceBlocks.pages')),
      ),
      onTimeout: onError,
      waitFirst: false,
    });
  }

  /** Create, tag and attach the source volumes once the instance is SSM-online, until all are attached. */
  private attachLoop(onError: ErrorRoute, catchInstanceLost: SpecificCatch[]): sfn.Chain {
    const bound = this.settings.attachPoll;
    return this.b.pollLoop({
      name: 'Attach volumes',
      counter: 'attach',
      bound,
      task: this.b.task(
        'Attach volumes',
        this.fn.attach_volumes,
        sfn.TaskInput.fromObject({ plan: $('$.plan'), instance: $('$.instance') }),
        '$.attached',
        onError,
        catchInstanceLost,
      ),
      done: sfn.Condition.booleanEquals('$.attached.done', true),
      timeoutError: 'VolumesNotAttached',
      timeoutCause: sfn.JsonPath.format(
        `The source volumes were not attached within ${minutesOf(bound)} minutes - still waiting for {} - ` +
          'check the EBS volume quota and the KMS keys of the source snapshots.',
        sfn.JsonPath.jsonToString($('$.attached.waitingFor')),
      ),
      onTimeout: onError,
      waitFirst: false,
    });
  }

  /** Everything from Start to `Delivered` (failure chain behind it), then the steps that only warn. */
  private mainPath(onError: ErrorRoute, onWarning: ErrorRoute): sfn.IChainable {
    const b = this.b;
    const fn = this.fn;
    const launchPhase = b.markPhase('Launch phase', 'launch');
    const catchInstanceLost = this.relaunchPath(launchPhase, onError);
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
    const waitReady = b.pollLoop({
      name: 'Wait until ready',
      counter: 'ready',
      bound: this.settings.readyPoll,
      task: b.task(
        'Check instance',
        fn.check_instance,
        sfn.TaskInput.fromObject({ plan: $('$.plan'), instance: $('$.instance') }),
        '$.ready',
        onError,
        catchInstanceLost,
      ),
      done: sfn.Condition.booleanEquals('$.ready.ready', true),
      timeoutError: 'InstanceNotReady',
      timeoutCause: 'The transfer instance did not become SSM-managed in time; check the subnets reach SSM.',
      onTimeout: onError,
      waitFirst: true,
    });
    const startCompaction = b.task(
      'Start compaction',
      fn.start_compaction,
      sfn.TaskInput.fromObject({
        plan: $('$.plan'),
        instance: $('$.instance'),
        attached: $('$.attached'),
        sourceBlocks: $('$.sourceBlocks'),
      }),
      '$.command',
      onError,
    );
    const compaction = b.pollLoop({
      name: 'Compaction',
      counter: 'compaction',
      bound: {
        intervalSecondsPath: '$.plan.compactionPoll.intervalSeconds',
        maxAttemptsPath: '$.plan.compactionPoll.maxAttempts',
        maxAttemptsCap: this.settings.compactionPoll.maxAttempts,
      },
      task: b.task(
        'Check compaction',
        fn.check_compaction,
        sfn.TaskInput.fromObject({ instance: $('$.instance'), command: $('$.command') }),
        '$.compaction',
        onError,
        catchInstanceLost,
      ),
      done: sfn.Condition.booleanEquals('$.compaction.done', true),
      timeoutError: 'CompactionTimedOut',
      timeoutCause: 'The Command document did not finish within the compaction poll bound of the plan.',
      onTimeout: onError,
      waitFirst: true,
    });
    const createSnapshots = b.task(
      'Create snapshots',
      fn.create_snapshots,
      sfn.TaskInput.fromObject({ plan: $('$.plan'), attached: $('$.attached') }),
      '$.snapshots',
      onError,
    );
    const snapshots = b.pollLoop({
      name: 'Snapshots',
      counter: 'snapshot',
      bound: this.settings.snapshotPoll,
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
    const delivered = new sfn.Pass(this, 'Delivered', {
      comment:
        'The new snapshots are completed and tagged delivered: from here on every error goes to the warnings chain',
    });

    const beforeDelivery = this.startState()
      .next(b.markPhase('Prepare phase', 'prepare'))
      .next(this.sourcesLoop(onError))
      .next(b.markPhase('List blocks phase', 'listBlocks'))
      .next(this.blockListLoop(onError))
      .next(launchPhase)
      .next(launch)
      .next(b.markPhase('Wait until ready phase', 'waitReady'))
      .next(waitReady)
      .next(b.markPhase('Attach phase', 'attach'))
      .next(this.attachLoop(onError, catchInstanceLost))
      .next(b.markPhase('Compaction phase', 'compaction'))
      .next(startCompaction)
      .next(compaction)
      .next(b.markPhase('Snapshot phase', 'snapshot'))
      .next(createSnapshots)
      .next(snapshots)
      .next(delivered);
    delivered.next(this.afterDelivery(onWarning));
    return beforeDelivery;
  }

  /** Register image, FSR, teardown(`success`), report: each error here goes to the warnings chain. */
  private afterDelivery(onWarning: ErrorRoute): sfn.IChainable {
    const b = this.b;
    const fn = this.fn;
    const registerImage = b
      .markPhase('Register image phase', 'registerImage')
      .next(
        b.task(
          'Register image',
          fn.register_image,
          sfn.TaskInput.fromObject({ plan: $('$.plan'), snapshots: $('$.snapshots') }),
          '$.image',
          onWarning,
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
          onWarning,
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
      bound: this.settings.teardownPoll,
      task: b.task(
        'Teardown',
        fn.teardown,
        teardownPayload('success', KEEP_DELIVERED),
        '$.teardown',
        onWarning,
      ),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause: 'The transfer instance or its volumes were not deleted in time.',
      onTimeout: onWarning,
      waitFirst: false,
    });
    const report = b.task('Report', fn.report, undefined, '$.report', onWarning);

    imageChoice
      .next(fsrChoice)
      .next(succeeded)
      .next(b.markPhase('Teardown phase', 'teardown'))
      .next(teardown)
      .next(b.markPhase('Report phase', 'report'))
      .next(report)
      .next(new sfn.Succeed(this, 'Done', { outputPath: '$.report' }));
    return imageChoice;
  }
}
