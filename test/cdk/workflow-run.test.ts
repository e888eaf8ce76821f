/**
 * Runs the synthesized state machine in aws-local-stepfunctions with fake task handlers, to check the
 * paths through it: what each task receives, in what order, and where errors lead.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { PHASES } from '../../lib/workflow-building-blocks';
import { AslDefinition, stateMachineDefinition, synthTemplate, taskModule } from './support';

// aws-local-stepfunctions 3 needs Node 22's Promise.withResolvers at run time; Node 20 runs the tests.
type Resolvers = { promise: Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void };
const promiseStatics = Promise as unknown as { withResolvers?: () => Resolvers };
promiseStatics.withResolvers ??= () => {
  let resolve!: (v: unknown) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
};
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { StateMachine } = require('aws-local-stepfunctions');

type Json = ReturnType<typeof JSON.parse>;
type Handler = (payload: Json, call: number) => Json;

class TaskError extends Error {
  constructor(name: string, message: string) {
    super(message);
    this.name = name;
  }
}

interface Call {
  state: string;
  module: string;
  payload: Json;
}

interface Outcome {
  calls: Call[];
  output?: Json;
  error?: { name: string; message: string };
}

const EXECUTION_NAME = 'exec-1';
const PLAN = {
  executionName: EXECUTION_NAME,
  source: { kind: 'snapshot', snapshotId: 'snap-a' },
  volumes: [{ index: 0, sourceSnapshotId: 'snap-a', deviceName: '/dev/xvda', sizeGiB: 8 }],
  image: null,
  fastSnapshotRestoreAzs: [],
  sourcesReady: true,
  pendingSnapshotIds: [],
  compactionPoll: { intervalSeconds: 30, maxAttempts: 5 },
};
const ATTACHED = {
  done: true,
  volumes: [
    {
      index: 0,
      sourceVolumeId: 'vol-src',
      targetVolumeId: 'vol-tgt',
      sourceDeviceName: '/dev/sdf',
      targetDeviceName: '/dev/sdp',
    },
  ],
  waitingFor: [],
};

/** What list_source_blocks answers once every source is listed (compactor/models.py SourceBlocksResult). */
const SOURCE_BLOCKS = {
  complete: true,
  bundleKey: `${EXECUTION_NAME}/source-blocks.tar.gz`,
  volumes: [
    {
      index: 0,
      snapshotId: 'snap-a',
      done: true,
      heldBlocks: 1234,
      volumeSizeGiB: 8,
      nextToken: null,
      nextBlockIndex: 16384,
      parts: 1,
      blockListError: null,
    },
  ],
  pages: 1,
};

/** A listing still under way after `pages` pages: where the next call resumes. */
function listingUnderWay(pages: number) {
  return {
    ...SOURCE_BLOCKS,
    complete: false,
    bundleKey: null,
    volumes: [{ ...SOURCE_BLOCKS.volumes[0], done: false, nextToken: `token-${pages}`, parts: pages }],
    pages,
  };
}

/** Handlers that succeed at once, as on a smooth run. */
function happyHandlers(plan: Json = PLAN): Record<string, Handler> {
  return {
    prepare: () => plan,
    list_source_blocks: () => SOURCE_BLOCKS,
    launch: (p) => ({ instanceId: `i-${p.launchAttempt}`, availabilityZone: 'us-east-1a' }),
    check_instance: (_p, call) => ({ ready: call >= 2, state: 'running', pingStatus: 'Online' }),
    attach_volumes: (_p, call) =>
      call >= 2 ? ATTACHED : { done: false, volumes: [], waitingFor: ['volume 0: creating'] },
    start_compaction: () => ({ commandId: 'cmd-1' }),
    check_compaction: (_p, call) => ({
      done: call >= 2,
      status: call >= 2 ? 'Success' : 'InProgress',
      summary: null,
    }),
    create_snapshots: () => ({
      snapshots: [{ index: 0, snapshotId: 'snap-new', sourceSnapshotId: 'snap-a' }],
    }),
    check_snapshots: (p) => ({ snapshots: p.snapshots.snapshots, completed: true }),
    register_image: () => ({ imageId: 'ami-new', warnings: [] }),
    enable_fast_snapshot_restore: () => ({
      states: [{ snapshotId: 'snap-new', availabilityZone: 'us-east-1a', state: 'enabling' }],
    }),
    teardown: () => ({
      remaining: 0,
      terminatedInstances: [],
      deletedVolumes: [],
      deletedSnapshots: [],
      deregisteredImages: [],
    }),
    report: (state) => ({
      outcome: state.outcome,
      executionName: state.executionName,
      error: state.error ?? null,
    }),
  };
}

/**
 * One machine per definition: constructing one validates the definition (asl-validator compiles its JSON
 * schema anew, about a quarter of a CPU-second), and a machine runs any number of executions.
 */
const machines = new Map<string, { run: (input: Json, options: object) => { result: Promise<Json> } }>();
function machineOf(definition: AslDefinition) {
  const key = JSON.stringify(definition);
  if (!machines.has(key)) {
    machines.set(key, new StateMachine(definition, { validationOptions: { checkArn: false } }));
  }
  return machines.get(key)!;
}

/** The error a .sync child's failure surfaces as in its parent (the cause is the child's DescribeExecution). */
class ChildFailed extends Error {
  constructor(description: Json) {
    super(JSON.stringify(description));
    this.name = 'States.TaskFailed';
  }
}

async function run(
  template: Template,
  input: Json,
  overrides: Partial<Record<string, Handler>> = {},
  which: 'Workflow' | 'Cleanup' = 'Workflow',
): Promise<Outcome> {
  const definition: AslDefinition = stateMachineDefinition(template, which);
  // the launch attempt: the child execution `Run attempt` starts (startExecution.sync:2), run here alike
  const attempt = which === 'Workflow' ? stateMachineDefinition(template, 'WorkflowAttempt') : undefined;
  const handlers = { ...happyHandlers(), ...overrides };
  const calls: Call[] = [];
  const perModule: Record<string, number> = {};
  const local: Record<string, (payload: Json) => Promise<Json>> = {};
  const waits: Record<string, number> = {};
  const retries: Record<string, number> = {};
  const options = () => ({
    overrides: {
      taskResourceLocalHandlers: local,
      waitTimeOverrides: waits,
      retryIntervalOverrides: retries,
    },
    context: {
      Execution: {
        Name: EXECUTION_NAME,
        Id: `arn:aws:states:us-east-1:111122223333:execution:wf:${EXECUTION_NAME}`,
      },
      State: { EnteredTime: '2026-01-01T00:00:00Z' },
    },
  });
  for (const [name, state] of [
    ...Object.entries(definition.States),
    ...Object.entries(attempt?.States ?? {}),
  ]) {
    if (state.Type === 'Wait') waits[name] = 0;
    if (state.Type !== 'Task') continue;
    retries[name] = 0;
    if (name === 'Run attempt') {
      local[name] = async (params: Json) => {
        try {
          return {
            Status: 'SUCCEEDED',
            Output: await machineOf(attempt!).run(params.Input, options()).result,
          };
        } catch (error) {
          const cause = (error as { cause?: { name: string; message: string } }).cause;
          throw new ChildFailed({ Status: 'FAILED', Error: cause?.name, Cause: cause?.message });
        }
      };
      continue;
    }
    const module = taskModule(template, state);
    local[name] = async (payload: Json) => {
      calls.push({ state: name, module, payload });
      perModule[module] = (perModule[module] ?? 0) + 1;
      return handlers[module]!(payload, perModule[module]);
    };
  }
  const execution = machineOf(definition).run(input, options());
  try {
    return { calls, output: await execution.result };
  } catch (error) {
    const cause = (error as { cause?: { name: string; message: string } }).cause;
    return { calls, error: { name: cause?.name ?? 'unknown', message: cause?.message ?? String(error) } };
  }
}

/** An AMI source with fast snapshot restore AZs: both steps after delivery run. */
const AMI_PLAN = {
  ...PLAN,
  source: { kind: 'image', imageId: 'ami-a' },
  fastSnapshotRestoreAzs: ['us-east-1a'],
};
const runAmi = (template: Template, overrides: Partial<Record<string, Handler>> = {}) =>
  run(template, { imageId: 'ami-a' }, { prepare: () => AMI_PLAN, ...overrides });

const modules = (outcome: Outcome) => outcome.calls.map((c) => c.module);
const callsOf = (outcome: Outcome, module: string) => outcome.calls.filter((c) => c.module === module);

describe('the workflow, run with fake tasks', () => {
  const template = synthTemplate({
    sourcePollMaxAttempts: 3,
    blockListPollMaxAttempts: 4,
    readyPollMaxAttempts: 4,
    attachPollMaxAttempts: 3,
    teardownPollMaxAttempts: 3,
  });
  const input = { snapshotId: 'snap-a' };

  test('a snapshot: the contract order, payloads, success teardown, report as output', async () => {
    const outcome = await run(template, input);
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome)).toEqual([
      'prepare',
      'list_source_blocks',
      'launch',
      'check_instance',
      'check_instance',
      'attach_volumes',
      'attach_volumes',
      'start_compaction',
      'check_compaction',
      'check_compaction',
      'create_snapshots',
      'check_snapshots',
      'teardown',
      'report',
    ]);
    const [
      prepare,
      listSourceBlocks,
      launch,
      checkInstance,
      ,
      attachVolumes,
      ,
      startCompaction,
      checkCompaction,
      ,
      createSnapshots,
      checkSnapshots,
      teardown,
      report,
    ] = outcome.calls.map((c) => c.payload);
    expect(prepare).toEqual({ input, executionName: EXECUTION_NAME });
    // the first call starts from scratch
    expect(listSourceBlocks).toEqual({ plan: PLAN, sourceBlocks: null });
    expect(launch).toEqual({ plan: PLAN, launchAttempt: 1 });
    expect(Object.keys(checkInstance).sort()).toEqual(['instance', 'plan']);
    expect(Object.keys(attachVolumes).sort()).toEqual(['instance', 'plan']);
    expect(Object.keys(startCompaction).sort()).toEqual([
      'attached',
      'instance',
      'launchAttempt',
      'plan',
      'sourceBlocks',
    ]);
    expect(startCompaction.launchAttempt).toBe(1);
    expect(startCompaction.attached).toEqual(ATTACHED);
    expect(startCompaction.sourceBlocks).toEqual(SOURCE_BLOCKS);
    expect(Object.keys(checkCompaction).sort()).toEqual(['command', 'compaction', 'instance']);
    expect(checkCompaction.command).toEqual({ commandId: 'cmd-1' });
    expect(checkCompaction.compaction).toBeNull(); // the first poll: no progress kept yet
    expect(createSnapshots).toEqual({ plan: PLAN, attached: ATTACHED });
    expect(Object.keys(checkSnapshots)).toEqual(['snapshots']);
    expect(teardown).toEqual({
      executionName: EXECUTION_NAME,
      outcome: 'success',
      keep: { snapshotIds: ['snap-new'], imageId: null },
    });
    expect(report.outcome).toBe('success');
    expect(report.image).toEqual({ imageId: null, warnings: [] });
    expect(report.fastSnapshotRestore).toEqual({ states: [] });
    expect(Object.keys(report.timings).sort()).toEqual(['start', ...PHASES].sort());
    expect(report.timings.registerImage).toBeNull();
    expect(report.timings.compaction).toBe('2026-01-01T00:00:00Z');
    // the report reads heldBlocks per volume from here
    expect(report.sourceBlocks).toEqual(SOURCE_BLOCKS);
    expect(report.polls).toEqual({
      sources: 1,
      blocks: 1,
      ready: 2,
      attach: 2,
      compaction: 2,
      snapshot: 1,
      teardown: 1,
    });
    expect(outcome.output).toEqual({ outcome: 'success', executionName: EXECUTION_NAME, error: null });
  });

  test('target snapshot: no Create snapshots; the snapshot loop waits for the direct snapshots Start compaction returned', async () => {
    const plan = { ...PLAN, target: 'snapshot' };
    const direct = [
      { index: 0, snapshotId: 'snap-direct', sourceSnapshotId: 'snap-a', deviceName: '/dev/xvda' },
    ];
    const outcome = await run(template, input, {
      prepare: () => plan,
      start_compaction: () => ({ commandId: 'cmd-1', directSnapshots: direct }),
      check_snapshots: (p, call) => ({ snapshots: p.snapshots.snapshots, completed: call >= 2 }),
    });
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome).slice(-6)).toEqual([
      'check_compaction',
      'check_compaction',
      'check_snapshots',
      'check_snapshots',
      'teardown',
      'report',
    ]);
    expect(callsOf(outcome, 'create_snapshots')).toEqual([]);
    expect(callsOf(outcome, 'check_snapshots')[0].payload).toEqual({
      snapshots: { snapshots: direct, completed: false },
    });
    expect(callsOf(outcome, 'teardown')[0].payload.keep).toEqual({
      snapshotIds: ['snap-direct'],
      imageId: null,
    });
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.timings.snapshot).toBe('2026-01-01T00:00:00Z');
    expect(report.polls.snapshot).toBe(2);
    expect(report.snapshots).toEqual({ snapshots: direct, completed: true });
  });

  test('target snapshot: direct snapshots never completed: SnapshotTimedOut after the failure teardown, which keeps nothing', async () => {
    const direct = [
      { index: 0, snapshotId: 'snap-direct', sourceSnapshotId: 'snap-a', deviceName: '/dev/xvda' },
    ];
    const outcome = await run(template, input, {
      prepare: () => ({ ...PLAN, target: 'snapshot' }),
      start_compaction: () => ({ commandId: 'cmd-1', directSnapshots: direct }),
      check_snapshots: (p) => ({ snapshots: p.snapshots.snapshots, completed: false }),
    });
    expect(outcome.error?.name).toBe('SnapshotTimedOut');
    expect(callsOf(outcome, 'create_snapshots')).toEqual([]);
    expect(callsOf(outcome, 'teardown')[0].payload).toMatchObject({
      outcome: 'failure',
      keep: { snapshotIds: [], imageId: null },
    });
    expect(modules(outcome).slice(-2)).toEqual(['teardown', 'report']);
  });

  test('target volume (and a plan without a target, as before) snapshots the target volumes', async () => {
    const outcome = await run(template, input, { prepare: () => ({ ...PLAN, target: 'volume' }) });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'create_snapshots')).toHaveLength(1);
    expect(callsOf(outcome, 'teardown')[0].payload.keep.snapshotIds).toEqual(['snap-new']);
  });

  test('target snapshot on an AMI source registers the image from the direct snapshots', async () => {
    const direct = [
      { index: 0, snapshotId: 'snap-direct', sourceSnapshotId: 'snap-a', deviceName: '/dev/xvda' },
    ];
    const outcome = await runAmi(template, {
      prepare: () => ({ ...AMI_PLAN, target: 'snapshot' }),
      start_compaction: () => ({ commandId: 'cmd-1', directSnapshots: direct }),
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'create_snapshots')).toEqual([]);
    expect(callsOf(outcome, 'register_image')[0].payload.snapshots).toEqual({
      snapshots: direct,
      completed: true,
    });
    expect(callsOf(outcome, 'teardown')[0].payload.keep).toEqual({
      snapshotIds: ['snap-direct'],
      imageId: 'ami-new',
    });
  });

  test('an AMI with fast snapshot restore AZs registers the image and enables FSR', async () => {
    const plan = AMI_PLAN;
    const outcome = await runAmi(template);
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome).slice(-4)).toEqual([
      'register_image',
      'enable_fast_snapshot_restore',
      'teardown',
      'report',
    ]);
    expect(callsOf(outcome, 'register_image')[0].payload).toEqual({ plan, snapshots: expect.any(Object) });
    expect(callsOf(outcome, 'teardown')[0].payload.keep).toEqual({
      snapshotIds: ['snap-new'],
      imageId: 'ami-new',
    });
  });

  test('a lost instance is torn down (retry) and launched again with the next attempt number', async () => {
    const outcome = await run(template, input, {
      check_compaction: (_p, call) => {
        if (call === 1) throw new TaskError('InstanceLost', 'i-1 was terminated (Spot interruption)');
        return { done: true, status: 'Success', summary: null };
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'launch').map((c) => c.payload.launchAttempt)).toEqual([1, 2]);
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(['retry', 'success']);
    // listed once; the relaunch keeps the lists and the second command gets them too
    expect(callsOf(outcome, 'list_source_blocks')).toHaveLength(1);
    expect(callsOf(outcome, 'start_compaction').map((c) => c.payload.sourceBlocks)).toEqual([
      SOURCE_BLOCKS,
      SOURCE_BLOCKS,
    ]);
    const secondLaunch = outcome.calls.findIndex(
      (c) => c.module === 'launch' && c.payload.launchAttempt === 2,
    );
    expect(outcome.calls[secondLaunch - 1].module).toBe('teardown');
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.error).toBeUndefined();
    expect(report.instance.instanceId).toBe('i-2');
  });

  test('instances lost on every attempt: maxLaunchAttempts launches, then failure teardown and InstanceLost', async () => {
    const outcome = await run(template, input, {
      check_instance: () => {
        throw new TaskError('InstanceLost', 'terminated');
      },
    });
    expect(callsOf(outcome, 'launch')).toHaveLength(3);
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual([
      'retry',
      'retry',
      'retry',
      'failure',
    ]);
    expect(callsOf(outcome, 'teardown')[3].payload.keep).toEqual({ snapshotIds: [], imageId: null });
    expect(callsOf(outcome, 'report')[0].payload).toMatchObject({
      outcome: 'failure',
      error: { Error: 'InstanceLost', Cause: 'terminated' },
    });
    expect(outcome.error).toEqual({ name: 'InstanceLost', message: 'terminated' });
  });

  test('an expected error in prepare: failure teardown, failure report, the execution fails with it', async () => {
    const outcome = await run(template, input, {
      prepare: () => {
        throw new TaskError('SnapshotNotFound', 'snap-a does not exist in us-east-1');
      },
    });
    expect(modules(outcome)).toEqual(['prepare', 'teardown', 'report']);
    expect(callsOf(outcome, 'teardown')[0].payload).toEqual({
      executionName: EXECUTION_NAME,
      outcome: 'failure',
      keep: { snapshotIds: [], imageId: null },
    });
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.outcome).toBe('failure');
    expect(report.executionName).toBe(EXECUTION_NAME);
    expect(report.plan).toBeUndefined();
    expect(outcome.error).toEqual({
      name: 'SnapshotNotFound',
      message: 'snap-a does not exist in us-east-1',
    });
  });

  test('a poll loop gives up at its bound with its timeout error, after tearing down', async () => {
    const outcome = await run(template, input, {
      check_instance: () => ({ ready: false, state: 'pending', pingStatus: null }),
    });
    expect(callsOf(outcome, 'check_instance')).toHaveLength(4);
    expect(modules(outcome).slice(-2)).toEqual(['teardown', 'report']);
    expect(outcome.error?.name).toBe('InstanceNotReady');
  });

  test('teardown is called again until nothing remains, within its bound', async () => {
    const outcome = await run(template, input, {
      teardown: (_p, call) => ({ remaining: call < 3 ? 1 : 0 }),
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'teardown')).toHaveLength(3);
  });

  test('a failure teardown that never finishes still reports and fails with the original error', async () => {
    const outcome = await run(template, input, {
      prepare: () => {
        throw new TaskError('KmsKeyNotUsable', 'no access to key k');
      },
      teardown: () => ({ remaining: 2 }),
    });
    expect(callsOf(outcome, 'teardown')).toHaveLength(3);
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.teardownError.Error).toBe('TeardownIncomplete');
    expect(outcome.error?.name).toBe('KmsKeyNotUsable');
  });

  test('Lambda throttling is retried, not treated as a failure', async () => {
    const outcome = await run(template, input, {
      launch: (p, call) => {
        if (call === 1) throw new TaskError('Lambda.TooManyRequestsException', 'Rate exceeded');
        return { instanceId: `i-${p.launchAttempt}` };
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'launch')).toHaveLength(2);
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(['success']);
  });

  test('pending source snapshots: prepare is called again until they are completed, then the run goes on', async () => {
    const outcome = await run(template, input, {
      prepare: (_p, call) =>
        call < 3 ? { ...PLAN, sourcesReady: false, pendingSnapshotIds: ['snap-a'] } : PLAN,
    });
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome).slice(0, 5)).toEqual([
      'prepare',
      'prepare',
      'prepare',
      'list_source_blocks',
      'launch',
    ]);
    expect(callsOf(outcome, 'launch')[0].payload.plan).toEqual(PLAN);
    expect(callsOf(outcome, 'report')[0].payload.polls.sources).toBe(3);
  });

  test('sources still pending at the bound: SnapshotNotCompleted naming them, after the failure teardown', async () => {
    const outcome = await run(template, input, {
      prepare: () => ({ ...PLAN, sourcesReady: false, pendingSnapshotIds: ['snap-a', 'snap-b'] }),
    });
    expect(modules(outcome)).toEqual(['prepare', 'prepare', 'prepare', 'teardown', 'report']);
    expect(callsOf(outcome, 'teardown')[0].payload.outcome).toBe('failure');
    expect(outcome.error?.name).toBe('SnapshotNotCompleted');
    expect(outcome.error?.message).toContain('["snap-a","snap-b"]');
    expect(outcome.error?.message).toContain('pending after 3 minutes'); // sourcePoll: 3 calls 60 s apart
  });

  test('block lists not complete yet: list_source_blocks is called again with its own last answer, then the run goes on', async () => {
    const outcome = await run(template, input, {
      list_source_blocks: (_p, call) => (call < 3 ? listingUnderWay(call) : SOURCE_BLOCKS),
    });
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome).slice(0, 5)).toEqual([
      'prepare',
      'list_source_blocks',
      'list_source_blocks',
      'list_source_blocks',
      'launch',
    ]);
    // each call resumes where the previous one stopped
    expect(callsOf(outcome, 'list_source_blocks').map((c) => c.payload)).toEqual([
      { plan: PLAN, sourceBlocks: null },
      { plan: PLAN, sourceBlocks: listingUnderWay(1) },
      { plan: PLAN, sourceBlocks: listingUnderWay(2) },
    ]);
    expect(callsOf(outcome, 'start_compaction')[0].payload.sourceBlocks).toEqual(SOURCE_BLOCKS);
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.polls.blocks).toBe(3);
    expect(report.sourceBlocks).toEqual(SOURCE_BLOCKS);
  });

  test('block lists never complete: BlockListIncomplete at the bound with the pages read, after the failure teardown', async () => {
    const outcome = await run(template, input, {
      list_source_blocks: (_p, call) => listingUnderWay(call * 10),
    });
    expect(modules(outcome)).toEqual([
      'prepare',
      'list_source_blocks',
      'list_source_blocks',
      'list_source_blocks',
      'list_source_blocks',
      'teardown',
      'report',
    ]);
    expect(callsOf(outcome, 'launch')).toEqual([]);
    expect(callsOf(outcome, 'teardown')[0].payload).toEqual({
      executionName: EXECUTION_NAME,
      outcome: 'failure',
      keep: { snapshotIds: [], imageId: null },
    });
    expect(callsOf(outcome, 'report')[0].state).toBe('Report failure');
    expect(outcome.error?.name).toBe('BlockListIncomplete');
    // blockListPoll: 4 calls 10 s apart, each listing for up to a minute
    expect(outcome.error?.message).toBe(
      "The source snapshots' blocks were not all listed in 4 calls (about 5 minutes; 40 pages read) - " +
        'raise blockListPollMaxAttempts, or check ListSnapshotBlocks throttling in the account.',
    );
  });

  test('an error in List source blocks goes to the failure chain before anything is launched', async () => {
    const outcome = await run(template, input, {
      list_source_blocks: () => {
        throw new TaskError('AccessDenied', 'PutObject on the source blocks bucket: Access Denied');
      },
    });
    expect(modules(outcome)).toEqual(['prepare', 'list_source_blocks', 'teardown', 'report']);
    expect(callsOf(outcome, 'teardown')[0].payload.outcome).toBe('failure');
    expect(callsOf(outcome, 'report')[0].payload.error).toEqual({
      Error: 'AccessDenied',
      Cause: 'PutObject on the source blocks bucket: Access Denied',
    });
    expect(outcome.error?.name).toBe('AccessDenied');
  });

  test('an error in Report keeps the snapshots: warnings teardown (success), report with warnings, SUCCEEDED', async () => {
    const outcome = await run(template, input, {
      report: (state, call) => {
        if (call === 1) throw new TaskError('EventsThrottled', 'PutEvents: Rate exceeded');
        return { outcome: state.outcome, warning: state.warning };
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(modules(outcome).slice(-4)).toEqual(['teardown', 'report', 'teardown', 'report']);
    const teardowns = callsOf(outcome, 'teardown').map((c) => c.payload);
    expect(teardowns.map((t) => t.outcome)).toEqual(['success', 'success']);
    for (const t of teardowns) expect(t.keep).toEqual({ snapshotIds: ['snap-new'], imageId: null });
    const [, warningsReport] = outcome.calls.filter((c) => c.module === 'report');
    expect(warningsReport.state).toBe('Report with warnings');
    expect(warningsReport.payload.outcome).toBe('succeeded-with-warnings');
    expect(warningsReport.payload.warning).toEqual({
      Error: 'EventsThrottled',
      Cause: 'PutEvents: Rate exceeded',
    });
    expect(outcome.output).toEqual({
      outcome: 'succeeded-with-warnings',
      warning: { Error: 'EventsThrottled', Cause: 'PutEvents: Rate exceeded' },
    });
  });

  test('an error in Register image fails the run (ImageNotDelivered) through the failure chain, naming and keeping the delivered snapshots', async () => {
    const outcome = await runAmi(template, {
      register_image: () => {
        throw new TaskError('ImageRegistrationFailed', 'RegisterImage: InvalidBlockDeviceMapping');
      },
    });
    expect(modules(outcome).slice(-3)).toEqual(['register_image', 'teardown', 'report']);
    expect(callsOf(outcome, 'enable_fast_snapshot_restore')).toEqual([]);
    // the failure teardown never deletes a snapshot tagged delivered (nor an AMI of a delivered execution)
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(['failure']);
    const report = callsOf(outcome, 'report')[0];
    expect(report.state).toBe('Report failure');
    expect(report.payload.outcome).toBe('failure');
    expect(report.payload.snapshots.snapshots.map((s: { snapshotId: string }) => s.snapshotId)).toEqual([
      'snap-new',
    ]);
    expect(outcome.error).toEqual({
      name: 'ImageNotDelivered',
      message:
        'The new snapshots ["snap-new"] are delivered and kept, but the AMI the input asked for was not ' +
        'delivered: ImageRegistrationFailed: RegisterImage: InvalidBlockDeviceMapping',
    });
  });

  test('an error in Enable fast snapshot restore keeps the registered AMI too', async () => {
    const outcome = await runAmi(template, {
      enable_fast_snapshot_restore: () => {
        throw new TaskError('FastSnapshotRestoreLimitExceeded', 'too many');
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.keep)).toEqual([
      { snapshotIds: ['snap-new'], imageId: 'ami-new' },
    ]);
    expect(outcome.output.outcome).toBe('succeeded-with-warnings');
  });

  test('a success teardown that never finishes ends as a warning, not a failure', async () => {
    const outcome = await run(template, input, { teardown: () => ({ remaining: 1 }) });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(Array(6).fill('success'));
    const report = callsOf(outcome, 'report')[0].payload;
    expect(report.warning.Error).toBe('TeardownIncomplete');
    expect(report.teardownError.Error).toBe('TeardownIncomplete');
    expect(outcome.output.outcome).toBe('succeeded-with-warnings');
  });

  test('the warnings report failing too ends in Report unavailable, which says what was delivered, and succeeds', async () => {
    const outcome = await run(template, input, {
      report: () => {
        throw new TaskError('EventsUnavailable', 'PutEvents failed');
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'report').map((c) => c.state)).toEqual(['Report', 'Report with warnings']);
    expect(outcome.output).toEqual({
      outcome: 'succeeded-with-warnings',
      executionName: EXECUTION_NAME,
      newSnapshotIds: ['snap-new'],
      imageId: null,
      warning: { Error: 'EventsUnavailable', Cause: 'PutEvents failed' },
      reportError: { Error: 'EventsUnavailable', Cause: 'PutEvents failed' },
    });
  });

  test('an error in Check compaction (before delivery) goes to the failure chain and fails the execution', async () => {
    const outcome = await run(template, input, {
      check_compaction: () => {
        throw new TaskError('CompactionFailed', 'sparsecopy: error: bad superblock');
      },
    });
    expect(modules(outcome).slice(-3)).toEqual(['check_compaction', 'teardown', 'report']);
    expect(callsOf(outcome, 'teardown')[0].payload).toEqual({
      executionName: EXECUTION_NAME,
      outcome: 'failure',
      keep: { snapshotIds: [], imageId: null },
    });
    expect(callsOf(outcome, 'report')[0].state).toBe('Report failure');
    expect(callsOf(outcome, 'create_snapshots')).toEqual([]);
    expect(outcome.error).toEqual({ name: 'CompactionFailed', message: 'sparsecopy: error: bad superblock' });
  });

  test('the compaction loop stops at the bound the plan gives', async () => {
    const plan = { ...PLAN, compactionPoll: { intervalSeconds: 600, maxAttempts: 2 } };
    const outcome = await run(template, input, {
      prepare: () => plan,
      check_compaction: () => ({ done: false, status: 'InProgress', summary: null }),
    });
    expect(callsOf(outcome, 'check_compaction')).toHaveLength(2);
    expect(outcome.error?.name).toBe('CompactionTimedOut');
  });

  test('InstanceLost in Attach volumes: teardown (retry) and a new launch', async () => {
    const outcome = await run(template, input, {
      attach_volumes: (_p, call) => {
        if (call === 1) throw new TaskError('InstanceLost', 'i-1 was terminated (Spot interruption)');
        return ATTACHED;
      },
    });
    expect(outcome.error).toBeUndefined();
    expect(callsOf(outcome, 'launch').map((c) => c.payload.launchAttempt)).toEqual([1, 2]);
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(['retry', 'success']);
    expect(callsOf(outcome, 'attach_volumes')[1].payload.instance.instanceId).toBe('i-2');
  });

  test('volumes never attached: VolumesNotAttached at the attach bound, after the failure teardown', async () => {
    const outcome = await run(template, input, {
      attach_volumes: () => ({ done: false, volumes: [], waitingFor: ['volume 0: creating'] }),
    });
    expect(callsOf(outcome, 'attach_volumes')).toHaveLength(3);
    expect(callsOf(outcome, 'teardown').map((c) => c.payload.outcome)).toEqual(['failure']);
    expect(outcome.error?.name).toBe('VolumesNotAttached');
    expect(outcome.error?.message).toContain('volume 0: creating');
  });
});

describe('the cleanup state machine, run with a fake teardown', () => {
  const template = synthTemplate({ teardownPollMaxAttempts: 3 });
  const input = {
    executionName: 'exec-0',
    executionArn: 'arn:aws:states:us-east-1:111122223333:execution:sm:exec-0',
    status: 'ABORTED',
  };

  test('teardown with outcome cleanup for the ended execution until nothing remains', async () => {
    const outcome = await run(
      template,
      input,
      { teardown: (_p, call) => ({ remaining: 3 - call, deletedSnapshots: call === 1 ? ['snap-x'] : [] }) },
      'Cleanup',
    );
    expect(outcome.error).toBeUndefined();
    expect(outcome.calls.map((c) => c.state)).toEqual(Array(3).fill('Cleanup teardown'));
    for (const call of outcome.calls) {
      expect(call.payload).toEqual({
        executionName: 'exec-0',
        outcome: 'cleanup',
        keep: { snapshotIds: [], imageId: null },
      });
    }
    expect(outcome.output).toEqual({ remaining: 0, deletedSnapshots: [] });
  });

  test('resources left at the bound: the cleanup fails with TeardownIncomplete', async () => {
    const outcome = await run(template, input, { teardown: () => ({ remaining: 2 }) }, 'Cleanup');
    expect(outcome.calls).toHaveLength(3);
    expect(outcome.error?.name).toBe('TeardownIncomplete');
  });
});
