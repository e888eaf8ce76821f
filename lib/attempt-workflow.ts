import { Duration } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import { Construct } from 'constructs';
import { Settings } from './settings';
import { $, contractError, ErrorRoute, SpecificCatch, WorkflowBuilder } from './workflow-building-blocks';

/**
 * The keys of the compaction state an attempt starts from (docs/contract.md): the parent hands them over and
 * the attempt's output is that state with the attempt's own results added.
 */
export const ATTEMPT_INPUT_KEYS = [
  'input',
  'executionName',
  'launchAttempt',
  'timings',
  'polls',
  'plan',
  'sourceBlocks',
  'compaction',
] as const;

/** The state names the parent and the twin rely on. */
export const ATTEMPT_STATES = {
  done: 'Attempt done',
  ended: 'Attempt ended with an error',
} as const;

export interface LaunchAttemptWorkflowProps {
  readonly settings: Settings;
  readonly functions: Readonly<Partial<Record<string, lambda.IFunction>>>;
  readonly logGroup: logs.ILogGroup;
}

/**
 * One launch attempt of a compaction, a child execution of the compaction workflow (startExecution.sync:2):
 * launch → wait until ready → attach volumes → compact → [not a dry run: snapshot (written directly, or
 * CreateSnapshot of the targets) until completed and tagged delivered]. Its history holds one attempt's poll
 * loops only, so the parent's stays small whatever maxLaunchAttempts is.
 *
 * It never fails on an error of the contract: every Catch puts `{Error, Cause}` at `$.error` and ends in
 * `Attempt ended with an error`, a Succeed whose output is the whole state (the resources made so far, the
 * timings and counters) - a failed child's cause is the only channel a Fail state has, capped at 32,768
 * characters, and a parent cannot parse a truncated cause. A lost instance (InstanceLost) is torn down here
 * first (outcome `retry`); the parent decides whether to launch again. Everything it makes is tagged with the
 * parent's execution name (`$.executionName`), so the parent's teardowns, the cleanup workflow and the
 * sweeper find it.
 */
export class LaunchAttemptWorkflow extends Construct {
  public readonly stateMachine: sfn.StateMachine;
  private readonly b: WorkflowBuilder;
  private readonly settings: Settings;

  constructor(scope: Construct, id: string, props: LaunchAttemptWorkflowProps) {
    super(scope, id);
    this.settings = props.settings;
    this.b = new WorkflowBuilder(this, 'attempt', props.functions);
    const ended = new sfn.Succeed(this, ATTEMPT_STATES.ended, {
      comment: 'The error is at $.error; the parent relaunches (InstanceLost) or takes its failure chain',
    });
    const onError: ErrorRoute = { next: ended, resultPath: '$.error' };
    const done = new sfn.Succeed(this, ATTEMPT_STATES.done);
    const catchInstanceLost = this.instanceLostPath(ended, onError);
    const definition = this.startState()
      .next(this.b.markPhase('Launch phase', 'launch'))
      .next(this.b.task('Launch transfer instance', onError))
      .next(this.b.markPhase('Wait until ready phase', 'waitReady'))
      .next(this.readyLoop(onError, catchInstanceLost))
      .next(this.b.markPhase('Attach phase', 'attach'))
      .next(this.attachLoop(onError, catchInstanceLost))
      .next(this.b.markPhase('Compaction phase', 'compaction'))
      .next(this.b.task('Start compaction', onError))
      .next(this.compactionLoop(onError, catchInstanceLost))
      .next(this.dryRunChoice(onError, done));

    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      stateMachineType: sfn.StateMachineType.STANDARD,
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      // never longer than its parent may run
      timeout: Duration.minutes(this.settings.stateMachineTimeoutMinutes),
      tracingEnabled: true,
      logs: { destination: props.logGroup, level: sfn.LogLevel.ALL, includeExecutionData: true },
    });
  }

  /** The parent's state (AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID, the console's link, dropped). */
  private startState(): sfn.Pass {
    return new sfn.Pass(this, 'Attempt start', {
      comment: 'The compaction state the parent handed over (docs/contract.md)',
      parameters: Object.fromEntries(ATTEMPT_INPUT_KEYS.map((key) => [key, $(`$.${key}`)])),
    });
  }

  /** Instance lost while waiting, attaching or compacting: teardown(`retry`), then end with InstanceLost. */
  private instanceLostPath(ended: sfn.Succeed, onError: ErrorRoute): SpecificCatch[] {
    const retryTeardown = this.b.teardownLoop(
      'Teardown before relaunch',
      this.settings.teardownPoll,
      onError,
      'The lost transfer instance or its volumes were not deleted in time.',
    );
    const instanceLost = this.b.markPhase('Instance lost: teardown phase', 'teardown');
    instanceLost.next(retryTeardown).next(ended);
    return [
      { errors: [contractError('InstanceLost')], route: { next: instanceLost, resultPath: '$.error' } },
    ];
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
    const minutes = Math.round((bound.maxAttempts * bound.intervalSeconds) / 60);
    return this.b.pollLoop({
      name: 'Attach volumes',
      counter: 'attach',
      bound,
      task: this.b.task('Attach volumes', onError, catchInstanceLost),
      done: sfn.Condition.booleanEquals('$.attached.done', true),
      timeoutError: 'VolumesNotAttached',
      timeoutCause: sfn.JsonPath.format(
        `The source volumes were not attached within ${minutes} minutes - still waiting for {} - ` +
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

  /** A dry run (`$.plan.dryRun`) ends after the compaction loop (it made no target); a compaction snapshots. */
  private dryRunChoice(onError: ErrorRoute, done: sfn.Succeed): sfn.Choice {
    const dryRun = sfn.Condition.and(
      sfn.Condition.isPresent('$.plan.dryRun'),
      sfn.Condition.booleanEquals('$.plan.dryRun', true),
    );
    return new sfn.Choice(this, 'Dry run?').when(dryRun, done).otherwise(this.snapshotsChoice(onError, done));
  }

  /**
   * Where the new snapshots come from, both ways into the ONE `Snapshots` poll loop (Check snapshots until
   * every new snapshot is `completed`, then it tags them delivered): `target: "snapshot"` (the plan's
   * `$.plan.target`) - the data plane has written them itself through the EBS direct APIs and Start
   * compaction returned them (`$.command.directSnapshots`), so `Direct snapshots` only puts that list where the
   * loop reads it; `target: "volume"` (or a plan without a target) - `Create snapshots` snapshots the target
   * volumes. Both phase marks stamp the one `snapshot` timing key.
   */
  private snapshotsChoice(onError: ErrorRoute, done: sfn.Succeed): sfn.Choice {
    const b = this.b;
    const loop = b.pollLoop({
      name: 'Snapshots',
      counter: 'snapshot',
      bound: this.settings.snapshotPoll,
      task: b.task('Check snapshots', onError),
      done: sfn.Condition.booleanEquals('$.snapshots.completed', true),
      timeoutError: 'SnapshotTimedOut',
      timeoutCause: 'The new snapshots did not complete within the snapshot poll bound.',
      onTimeout: onError,
      waitFirst: true,
    });
    loop.next(done);
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
}
