import { Duration } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { LIMITS, PollLoopSettings, Settings } from './settings';
import { WorkflowTaskModule } from './task-functions';
import {
  contractError,
  ErrorRoute,
  JSON_NULL,
  PHASES,
  POLL_LOOPS,
  SpecificCatch,
  WorkflowBuilder,
} from './workflow-building-blocks';

export interface CompactionWorkflowProps {
  readonly settings: Settings;
  readonly functions: Record<WorkflowTaskModule, lambda.IFunction>;
  readonly logGroup: logs.ILogGroup;
}

export const $ = (path: string) => sfn.JsonPath.objectAt(path);

/** How long a poll loop may run, for the messages of its timeout errors. */
const minutesOf = (bound: PollLoopSettings) => Math.round((bound.maxAttempts * bound.intervalSeconds) / 60);

/** Seconds list_source_blocks lists per call (contract/limits.json blockListSliceSeconds). */
export const BLOCK_LIST_SLICE_SECONDS = LIMITS.blockListSliceSeconds;
/** The block-list loop's calls take a slice of listing each besides the wait between them. */
const blockListMinutes = (bound: PollLoopSettings) =>
  Math.round((bound.maxAttempts * (bound.intervalSeconds + BLOCK_LIST_SLICE_SECONDS)) / 60);

/**
 * The compaction workflow of docs/contract.md: prepare (until the sources are completed) → list the source
 * snapshots' blocks → launch → wait
 * until ready → attach volumes → compact → snapshot (written directly by the data plane, or CreateSnapshot of the
 * target volumes) → Delivered → [register image] → [fast snapshot restore]
 * → teardown → report; a dry run goes from compact to its own teardown and report (outcome `estimated`). Lost instances take the relaunch path. Before `Delivered` every task catches into the
 * failure chain (teardown → report → Fail); from `Delivered` on, into the warnings chain, which keeps the
 * new snapshots and AMI and ends in success with outcome `succeeded-with-warnings` - except Register image, whose
 * error fails the run (`ImageNotDelivered`) through the failure chain, which keeps the delivered snapshots.
 */
export class CompactionWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;
  private readonly b: WorkflowBuilder;
  private readonly settings: Settings;

  constructor(scope: Construct, id: string, props: CompactionWorkflowProps) {
    super(scope, id);
    this.settings = props.settings;
    this.b = new WorkflowBuilder(this, 'main', props.functions);

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
    const failureReport = b.task('Report failure', { next: fail, resultPath: '$.reportError' });
    failureReport.next(fail);
    const failureReportPhase = b.markPhase('Failure: report phase', 'report');
    failureReportPhase.next(failureReport);
    const failureTeardown = b.teardownLoop(
      'Teardown after failure',
      this.settings.teardownPoll,
      { next: failureReportPhase, resultPath: '$.teardownError' },
      'Resources tagged with this execution remain after the failure teardown; delete them by hand.',
    );
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
    const reportPhase = this.warningsReport();
    const teardown = b.teardownLoop(
      'Teardown with warnings',
      this.settings.teardownPoll,
      { next: reportPhase, resultPath: '$.teardownError' },
      'The transfer instance or its volumes were not deleted in time; the new snapshots are kept. ' +
        'Delete what is tagged with this execution by hand.',
    );
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

  /** `Report with warnings` → Succeed, or `Report unavailable` (a report made of the state) → Succeed. */
  private warningsReport(): sfn.Pass {
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
    const report = this.b.task('Report with warnings', {
      next: reportUnavailable,
      resultPath: '$.reportError',
    });
    report.next(done);
    const reportPhase = this.b.markPhase('Warnings: report phase', 'report');
    reportPhase.next(report);
    return reportPhase;
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
        compaction: JSON_NULL,
      },
    });
    relaunch.next(launchPhase);
    const canRelaunch = new sfn.Choice(this, 'Launch again?')
      .when(sfn.Condition.numberLessThan('$.launchAttempt', this.settings.maxLaunchAttempts), relaunch)
      .otherwise(onError.next);
    const retryTeardown = b.teardownLoop(
      'Teardown before relaunch',
      this.settings.teardownPoll,
      onError,
      'The lost transfer instance or its volumes were not deleted in time.',
    );
    const instanceLost = b.markPhase('Instance lost: teardown phase', 'teardown');
    instanceLost.next(retryTeardown).next(canRelaunch);
    return [
      { errors: [contractError('InstanceLost')], route: { next: instanceLost, resultPath: '$.error' } },
    ];
  }

  private startState(): sfn.Pass {
    return new sfn.Pass(this, 'Start', {
      comment: 'State layout of docs/contract.md; every timings/polls key exists from here on',
      parameters: {
        input: sfn.JsonPath.entirePayload,
        executionName: sfn.JsonPath.executionName,
        launchAttempt: 1,
        sourceBlocks: JSON_NULL,
        // Check compaction reads its last result (the progress it keeps): none before the first poll
        compaction: JSON_NULL,
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
      task: this.b.task('Prepare', onError),
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
      task: this.b.task('List source blocks', onError),
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

  /** Check instance until it is SSM-online (it takes a while to boot, so the loop waits first). */
  private readyLoop(onError: ErrorRoute, catchInstanceLost: SpecificCatch[]): sfn.Chain {
    return this.b.pollLoop({
      name: 'Wait until ready',
      counter: 'ready',
      bound: this.settings.readyPoll,
      task: this.b.task('Check instance', onError, catchInstanceLost),
      done: sfn.Condition.booleanEquals('$.ready.ready', true),
      timeoutError: 'InstanceNotReady',
      timeoutCause: 'The transfer instance did not become SSM-managed in time; check the subnets reach SSM.',
      onTimeout: onError,
      waitFirst: true,
    });
  }

  /** Create, tag and attach the source volumes once the instance is SSM-online, until all are attached. */
  private attachLoop(onError: ErrorRoute, catchInstanceLost: SpecificCatch[]): sfn.Chain {
    const bound = this.settings.attachPoll;
    return this.b.pollLoop({
      name: 'Attach volumes',
      counter: 'attach',
      bound,
      task: this.b.task('Attach volumes', onError, catchInstanceLost),
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

  /** Check compaction until the command is done, bounded by the plan's compaction poll (capped here). */
  private compactionLoop(onError: ErrorRoute, catchInstanceLost: SpecificCatch[]): sfn.Chain {
    return this.b.pollLoop({
      name: 'Compaction',
      counter: 'compaction',
      bound: {
        intervalSecondsPath: '$.plan.compactionPoll.intervalSeconds',
        maxAttemptsPath: '$.plan.compactionPoll.maxAttempts',
        maxAttemptsCap: this.settings.compactionPoll.maxAttempts,
      },
      task: this.b.task('Check compaction', onError, catchInstanceLost),
      done: sfn.Condition.booleanEquals('$.compaction.done', true),
      timeoutError: 'CompactionTimedOut',
      timeoutCause: 'The Command document did not finish within the compaction poll bound of the plan.',
      onTimeout: onError,
      waitFirst: true,
    });
  }

  /** Check snapshots until the new snapshots are completed (and tagged delivered). */
  private snapshotLoop(onError: ErrorRoute): sfn.Chain {
    return this.b.pollLoop({
      name: 'Snapshots',
      counter: 'snapshot',
      bound: this.settings.snapshotPoll,
      task: this.b.task('Check snapshots', onError),
      done: sfn.Condition.booleanEquals('$.snapshots.completed', true),
      timeoutError: 'SnapshotTimedOut',
      timeoutCause: 'The new snapshots did not complete within the snapshot poll bound.',
      onTimeout: onError,
      waitFirst: true,
    });
  }

  /** Everything from Start to `Delivered` (failure chain behind it), then the steps that only warn. */
  private mainPath(onError: ErrorRoute, onWarning: ErrorRoute): sfn.IChainable {
    const b = this.b;
    const launchPhase = b.markPhase('Launch phase', 'launch');
    const catchInstanceLost = this.relaunchPath(launchPhase, onError);
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
      .next(b.task('Launch transfer instance', onError))
      .next(b.markPhase('Wait until ready phase', 'waitReady'))
      .next(this.readyLoop(onError, catchInstanceLost))
      .next(b.markPhase('Attach phase', 'attach'))
      .next(this.attachLoop(onError, catchInstanceLost))
      .next(b.markPhase('Compaction phase', 'compaction'))
      .next(b.task('Start compaction', onError))
      .next(this.compactionLoop(onError, catchInstanceLost))
      .next(this.dryRunChoice(onError, delivered));
    delivered.next(this.afterDelivery(onError, onWarning));
    return beforeDelivery;
  }

  /**
   * After the compaction loop: a dry run (`$.plan.dryRun`) has only inspected the sources, so it goes to
   * its own teardown (nothing kept: it made no target, snapshot or AMI) and a report of outcome
   * `estimated`; a compaction goes on to its new snapshots (`Target is a snapshot?`) and `Delivered`.
   */
  private dryRunChoice(onError: ErrorRoute, delivered: sfn.Pass): sfn.Choice {
    const b = this.b;
    const snapshots = this.snapshotsChoice(onError, delivered);
    const estimated = new sfn.Pass(this, 'Estimated', {
      comment: 'A dry run: the sources were only inspected; no target volume, snapshot or AMI exists',
      result: sfn.Result.fromString('estimated'),
      resultPath: '$.outcome',
    });
    const teardown = b.teardownLoop(
      'Dry run teardown',
      this.settings.teardownPoll,
      onError,
      'The transfer instance or the source volumes of the dry run were not deleted in time.',
    );
    estimated
      .next(b.markPhase('Dry run: teardown phase', 'teardown'))
      .next(teardown)
      .next(b.markPhase('Dry run: report phase', 'report'))
      .next(b.task('Dry run report', onError))
      .next(new sfn.Succeed(this, 'Done estimating', { outputPath: '$.report' }));
    const dryRun = sfn.Condition.and(
      sfn.Condition.isPresent('$.plan.dryRun'),
      sfn.Condition.booleanEquals('$.plan.dryRun', true),
    );
    return new sfn.Choice(this, 'Dry run?').when(dryRun, estimated).otherwise(snapshots);
  }

  /**
   * Where the new snapshots come from, both ways into the ONE `Snapshots` poll loop (Check snapshots until
   * every new snapshot is `completed`, then it tags them delivered): `target: "snapshot"` (the plan's
   * `$.plan.target`) - the data plane has written them itself through the EBS direct APIs and Start
   * compaction returned them (`$.command.directSnapshots`), so `Direct snapshots` only puts that list where the
   * loop reads it; `target: "volume"` (or a plan without a target) - `Create snapshots` snapshots the target
   * volumes. Both phase marks stamp the one `snapshot` timing key.
   */
  private snapshotsChoice(onError: ErrorRoute, delivered: sfn.Pass): sfn.Choice {
    const b = this.b;
    const loop = this.snapshotLoop(onError);
    loop.next(delivered);
    const createSnapshots = b.markPhase('Snapshot phase', 'snapshot');
    createSnapshots.next(b.task('Create snapshots', onError)).next(loop);
    const directSnapshots = new sfn.Pass(this, 'Direct snapshots', {
      comment:
        'target snapshot: the data plane wrote the new snapshots (StartSnapshot in Start compaction, puts and ' +
        'CompleteSnapshot on the instance); the snapshot loop waits for them to be completed',
      parameters: { snapshots: sfn.JsonPath.listAt('$.command.directSnapshots'), completed: false },
      resultPath: '$.snapshots',
    });
    directSnapshots.next(loop);
    const directPhase = b.markPhase('Direct snapshot phase', 'snapshot');
    directPhase.next(directSnapshots);
    const targetIsSnapshot = sfn.Condition.and(
      sfn.Condition.isPresent('$.plan.target'),
      sfn.Condition.stringEquals('$.plan.target', 'snapshot'),
    );
    return new sfn.Choice(this, 'Target is a snapshot?')
      .when(targetIsSnapshot, directPhase)
      .otherwise(createSnapshots);
  }

  /**
   * Register image, FSR, teardown(`success`), report: an error in Register image fails the run (the AMI, and
   * its sharing, are what an image input asks for: `ImageNotDelivered`, the delivered snapshots kept and named);
   * every other error here goes to the warnings chain.
   */
  private afterDelivery(onError: ErrorRoute, onWarning: ErrorRoute): sfn.IChainable {
    const b = this.b;
    const succeeded = new sfn.Pass(this, 'Success', {
      result: sfn.Result.fromString('success'),
      resultPath: '$.outcome',
    });
    const teardown = b.teardownLoop(
      'Teardown',
      this.settings.teardownPoll,
      onWarning,
      'The transfer instance or its volumes were not deleted in time.',
    );
    const imageChoice = this.imageStep(onError);
    imageChoice
      .next(this.fastSnapshotRestoreStep(onWarning))
      .next(succeeded)
      .next(b.markPhase('Teardown phase', 'teardown'))
      .next(teardown)
      .next(b.markPhase('Report phase', 'report'))
      .next(b.task('Report', onWarning))
      .next(new sfn.Succeed(this, 'Done', { outputPath: '$.report' }));
    return imageChoice;
  }

  /**
   * AMI sources: register the new image; others: `$.image` says there is none. The AMI (with the sharing the
   * input asked for) is a deliverable: its error goes to the failure chain as `ImageNotDelivered`, whose cause
   * names the delivered snapshots (kept: they are tagged delivered) and the original error.
   */
  private imageStep(onError: ErrorRoute): sfn.Chain {
    const notDelivered = this.b.raise(
      'Image not delivered',
      'ImageNotDelivered',
      sfn.JsonPath.format(
        'The new snapshots {} are delivered and kept, but the AMI the input asked for was not delivered: {}: {}',
        sfn.JsonPath.jsonToString(sfn.JsonPath.objectAt('$.snapshots.snapshots[*].snapshotId')),
        sfn.JsonPath.stringAt('$.imageError.Error'),
        sfn.JsonPath.stringAt('$.imageError.Cause'),
      ),
      onError,
    );
    const registerImage = this.b
      .markPhase('Register image phase', 'registerImage')
      .next(this.b.task('Register image', { next: notDelivered, resultPath: '$.imageError' }));
    const noImage = new sfn.Pass(this, 'No image to register', {
      result: sfn.Result.fromObject({ imageId: null, warnings: [] }),
      resultPath: '$.image',
    });
    return new sfn.Choice(this, 'Source is an AMI?')
      .when(sfn.Condition.stringEquals('$.plan.source.kind', 'image'), registerImage)
      .otherwise(noImage)
      .afterwards();
  }

  /** Enable fast snapshot restore when the input names AZs; else `$.fastSnapshotRestore` has no states. */
  private fastSnapshotRestoreStep(onWarning: ErrorRoute): sfn.Chain {
    const fastSnapshotRestore = this.b
      .markPhase('Fast snapshot restore phase', 'fastSnapshotRestore')
      .next(this.b.task('Enable fast snapshot restore', onWarning));
    const noFastSnapshotRestore = new sfn.Pass(this, 'No fast snapshot restore', {
      result: sfn.Result.fromObject({ states: [] }),
      resultPath: '$.fastSnapshotRestore',
    });
    return new sfn.Choice(this, 'Fast snapshot restore wanted?')
      .when(sfn.Condition.isPresent('$.plan.fastSnapshotRestoreAzs[0]'), fastSnapshotRestore)
      .otherwise(noFastSnapshotRestore)
      .afterwards();
  }
}
