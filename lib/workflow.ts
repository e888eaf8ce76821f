import { Duration } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as tasks from 'aws-cdk-lib/aws-stepfunctions-tasks';
import { Construct } from 'constructs';
import { ATTEMPT_INPUT_KEYS, LaunchAttemptWorkflow } from './attempt-workflow';
import { LIMITS, PollLoopSettings, Settings } from './settings';
import { WorkflowTaskModule } from './task-functions';
import {
  $,
  contractError,
  ErrorRoute,
  JSON_NULL,
  PHASES,
  POLL_LOOPS,
  retryStartExecution,
  WorkflowBuilder,
} from './workflow-building-blocks';

export interface CompactionWorkflowProps {
  readonly settings: Settings;
  readonly functions: Record<WorkflowTaskModule, lambda.IFunction>;
  readonly logGroup: logs.ILogGroup;
}

/** How long a poll loop may run, for the messages of its timeout errors. */
const minutesOf = (bound: PollLoopSettings) => Math.round((bound.maxAttempts * bound.intervalSeconds) / 60);

/** Seconds list_source_blocks lists per call (contract/limits.json blockListSliceSeconds). */
export const BLOCK_LIST_SLICE_SECONDS = LIMITS.blockListSliceSeconds;
/** The block-list loop's calls take a slice of listing each besides the wait between them. */
const blockListMinutes = (bound: PollLoopSettings) =>
  Math.round((bound.maxAttempts * (bound.intervalSeconds + BLOCK_LIST_SLICE_SECONDS)) / 60);

/**
 * The compaction workflow of docs/contract.md: prepare (until the sources are completed) → list the source
 * snapshots' blocks → `Run attempt`, a child execution of the launch attempt (lib/attempt-workflow.ts: launch →
 * wait until ready → attach volumes → compact → snapshot, written directly by the data plane or CreateSnapshot
 * of the target volumes) → Delivered → [register image] → [fast snapshot restore] → teardown → report; a dry
 * run goes from its attempt to its own teardown and report (outcome `estimated`). An attempt that lost its
 * instance is run again (`Launch again?`). Before `Delivered` every error goes to the failure chain (teardown →
 * report → Fail); from `Delivered` on, into the warnings chain, which keeps the new snapshots and AMI and ends
 * in success with outcome `succeeded-with-warnings` - except Register image, whose error fails the run
 * (`ImageNotDelivered`) through the failure chain, which keeps the delivered snapshots.
 */
export class CompactionWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;
  /** Each launch attempt runs as a child execution of this state machine. */
  public readonly attempt: LaunchAttemptWorkflow;
  private readonly b: WorkflowBuilder;
  private readonly settings: Settings;

  constructor(scope: Construct, id: string, props: CompactionWorkflowProps) {
    super(scope, id);
    this.settings = props.settings;
    this.b = new WorkflowBuilder(this, 'main', props.functions);

    this.attempt = new LaunchAttemptWorkflow(this, 'Attempt', props);
    // Both chains are built first because the tasks' Catches point at them.
    const onError = this.failureChain();
    const onWarning = this.warningsChain();
    const definition = this.mainPath(this.attempt.stateMachine, onError, onWarning);

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
   * `Run attempt`: one launch attempt as a child execution (lib/attempt-workflow.ts, startExecution.sync:2),
   * named after this execution and the attempt (idempotent when a throttled start is retried: Step Functions
   * answers a running execution's name and input with that execution). Its output, the whole state with the
   * attempt's results, becomes this state; it ends with `$.error` when the attempt met an error. A child that
   * fails anyway (States.Runtime, its timeout, a stop) fails the Task with States.TaskFailed, whose cause is the
   * child's DescribeExecution: the failure chain tears down by the execution's tag all the same.
   */
  private runAttempt(attempt: sfn.IStateMachine, onError: ErrorRoute): tasks.StepFunctionsStartExecution {
    const task = new tasks.StepFunctionsStartExecution(this, 'Run attempt', {
      comment: 'Launch, wait, attach, compact, snapshot: one attempt, its poll loops in its own history',
      stateMachine: attempt,
      integrationPattern: sfn.IntegrationPattern.RUN_JOB,
      name: sfn.JsonPath.format(
        '{}-attempt-{}',
        sfn.JsonPath.hash(sfn.JsonPath.executionId, 'MD5'),
        sfn.JsonPath.stringAt('$.launchAttempt'),
      ),
      input: sfn.TaskInput.fromObject(
        Object.fromEntries(ATTEMPT_INPUT_KEYS.map((key) => [key, $(`$.${key}`)])),
      ),
      associateWithParent: true,
      // no ResultPath: DescribeExecution replaces the state, and its Output (JSON, .sync:2) is the new state
      outputPath: '$.Output',
    });
    retryStartExecution(task);
    task.addCatch(onError.next, { errors: [sfn.Errors.ALL], resultPath: onError.resultPath });
    return task;
  }

  /**
   * After an attempt: an error (`$.error`) → `Launch again?` (InstanceLost while attempts remain: `Relaunch`,
   * a fresh state for the next `Run attempt`; any other error, or the last attempt: the failure chain); a dry
   * run → `estimated`; else the new snapshots are delivered.
   */
  private attemptOutcome(
    runAttempt: sfn.IChainable,
    onError: ErrorRoute,
    estimated: sfn.IChainable,
    delivered: sfn.IChainable,
  ): sfn.Choice {
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
    relaunch.next(runAttempt);
    const canRelaunch = new sfn.Choice(this, 'Launch again?')
      .when(
        sfn.Condition.and(
          sfn.Condition.stringEquals('$.error.Error', contractError('InstanceLost')),
          sfn.Condition.numberLessThan('$.launchAttempt', this.settings.maxLaunchAttempts),
        ),
        relaunch,
      )
      .otherwise(onError.next);
    const dryRun = sfn.Condition.and(
      sfn.Condition.isPresent('$.plan.dryRun'),
      sfn.Condition.booleanEquals('$.plan.dryRun', true),
    );
    return new sfn.Choice(this, 'Attempt outcome?')
      .when(sfn.Condition.isPresent('$.error'), canRelaunch)
      .when(dryRun, estimated)
      .otherwise(delivered);
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

  /** Everything from Start to `Delivered` (failure chain behind it), then the steps that only warn. */
  private mainPath(attempt: sfn.IStateMachine, onError: ErrorRoute, onWarning: ErrorRoute): sfn.IChainable {
    const b = this.b;
    const delivered = new sfn.Pass(this, 'Delivered', {
      comment:
        'The new snapshots are completed and tagged delivered: from here on every error goes to the warnings chain',
    });
    const runAttempt = this.runAttempt(attempt, onError);
    const beforeDelivery = this.startState()
      .next(b.markPhase('Prepare phase', 'prepare'))
      .next(this.sourcesLoop(onError))
      .next(b.markPhase('List blocks phase', 'listBlocks'))
      .next(this.blockListLoop(onError))
      .next(runAttempt)
      .next(this.attemptOutcome(runAttempt, onError, this.dryRunEnd(onError), delivered));
    delivered.next(this.afterDelivery(onError, onWarning));
    return beforeDelivery;
  }

  /**
   * A dry run (`$.plan.dryRun`) has only inspected the sources, so it goes to its own teardown (nothing kept:
   * it made no target, snapshot or AMI) and a report of outcome `estimated`.
   */
  private dryRunEnd(onError: ErrorRoute): sfn.Pass {
    const b = this.b;
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
    return estimated;
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
