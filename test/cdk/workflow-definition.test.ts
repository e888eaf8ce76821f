import { TASK_TIMEOUTS } from '../../lib/task-functions';
import { BLOCK_LIST_SLICE_SECONDS } from '../../lib/workflow';
import {
  START_EXECUTION_RETRY_ERRORS,
  LAMBDA_SERVICE_ERRORS,
  PHASES,
  POLL_LOOPS,
  TASK_TABLE,
  TRANSIENT_AWS_ERROR,
} from '../../lib/workflow-building-blocks';
import {
  AslState,
  inlinedWorkflowDefinition,
  reachable,
  stateMachineDefinition,
  successors,
  synthTemplate,
  taskModule,
} from './support';

/** The state machines of the compaction: the workflow and its launch attempt. */
const IN_WORKFLOW: string[] = ['main', 'attempt'];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * What Step Functions gets for a payload of contract/tasks.json: `$...` strings are JSONPaths (key + `.$`),
 * null a JSON null made by an intrinsic (CDK drops null), anything else a literal.
 */
function aslParameters(payload: Json): Json {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return payload;
  return Object.fromEntries(
    Object.entries(payload).map(([key, value]) => {
      if (value === null) return [`${key}.$`, "States.StringToJson('null')"];
      if (typeof value === 'string' && value.startsWith('$')) return [`${key}.$`, value];
      return [key, aslParameters(value)];
    }),
  );
}

/** Strongly connected components with more than one state (Tarjan), over the given edges. */
function cycles(names: string[], edges: (name: string) => string[]): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const result: string[][] = [];
  let counter = 0;
  const visit = (name: string) => {
    index.set(name, counter);
    low.set(name, counter);
    counter++;
    stack.push(name);
    onStack.add(name);
    for (const next of edges(name)) {
      if (!index.has(next)) {
        visit(next);
        low.set(name, Math.min(low.get(name)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(name, Math.min(low.get(name)!, index.get(next)!));
      }
    }
    if (low.get(name) === index.get(name)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== name);
      if (component.length > 1) result.push(component);
    }
  };
  for (const name of names) if (!index.has(name)) visit(name);
  return result;
}

/**
 * The edge a bounded Choice takes to go round again, if the Choice compares an attempt counter with a
 * fixed number: `>= bound` exits (Default continues) or `< bound` continues (Default exits). A bound read
 * from the state (`>= $.path`) counts only with a fixed cap beside it in the same Choice.
 */
function boundedContinuation(state: AslState): { counter: string; edge: string } | undefined {
  if (state.Type !== 'Choice') return undefined;
  for (const choice of state.Choices ?? []) {
    // a rule of an And (`Launch again?`: InstanceLost and attempts left) bounds the cycle as well
    const parts = (choice.And as Record<string, Json>[] | undefined) ?? [choice];
    const bounded = parts
      .map((rule) => boundOf(rule, choice.Next, state.Default!))
      .find((b) => b !== undefined);
    if (bounded) return bounded;
  }
  return undefined;
}

/** The continuation of one rule: `>= bound` exits (the Choice's Default continues), `< bound` continues. */
function boundOf(
  rule: Record<string, Json>,
  next: string,
  otherwise: string,
): { counter: string; edge: string } | undefined {
  const counter = /^\$\.(polls\.[a-zA-Z]+|launchAttempt)$/.exec(String(rule.Variable));
  if (!counter) return undefined;
  if (typeof rule.NumericGreaterThanEquals === 'number') return { counter: counter[1], edge: otherwise };
  // NumericGreaterThanEqualsPath needs the fixed cap too
  if (typeof rule.NumericLessThan === 'number') return { counter: counter[1], edge: next };
  return undefined;
}

/** True when the state adds 1 to the counter ("polls.ready" or "launchAttempt"). */
function increments(state: AslState, counter: string): boolean {
  const [object, key] = counter.includes('.') ? counter.split('.') : [undefined, counter];
  const parameters = state.Parameters ?? {};
  const ok = parameters[`${key}.$`] === `States.MathAdd($.${counter}, 1)`;
  return ok && (object === undefined ? state.ResultPath === undefined : state.ResultPath === `$.${object}`);
}

describe('state machine definition', () => {
  const template = synthTemplate({
    compactionPollSeconds: 90,
    sourcePollSeconds: 45,
    sourcePollMaxAttempts: 100,
    attachPollSeconds: 20,
    attachPollMaxAttempts: 30,
    blockListPollSeconds: 15,
    blockListPollMaxAttempts: 12,
    maxLaunchAttempts: 2,
  });
  // the launch attempt, a child execution, inlined where Run attempt starts it (its own tests are below)
  const definition = inlinedWorkflowDefinition(template);
  const states = Object.entries(definition.States);
  const tasks = states.filter(([, state]) => state.Type === 'Task');

  test('one Task per contract step, each running a stack function', () => {
    const modules = new Set(tasks.map(([, state]) => taskModule(template, state)));
    expect([...modules].sort()).toEqual(
      TASK_TABLE.filter(
        (task) => task.workflow && task.states.some((s) => IN_WORKFLOW.includes(s.stateMachine)),
      )
        .map((task) => task.module)
        .sort(),
    );
  });

  test("every Task state is contract/tasks.json's: module, payload, result path", () => {
    const table = TASK_TABLE.flatMap((task) =>
      task.states
        .filter((s) => IN_WORKFLOW.includes(s.stateMachine))
        .map((s) => [s.state, task.module, s] as const),
    );
    expect(tasks.map(([name]) => name).sort()).toEqual(table.map(([name]) => name).sort());
    for (const [name, module, entry] of table) {
      const state = definition.States[name];
      expect({ name, module: taskModule(template, state), parameters: state.Parameters }).toEqual({
        name,
        module,
        parameters: entry.payload === '$' ? undefined : aslParameters(entry.payload),
      });
      expect(state.ResultPath).toBe(entry.resultPath);
    }
  });

  test.each(tasks)('Task "%s" retries Lambda service errors and catches everything last', (_name, state) => {
    const lambdaRetry = (state.Retry ?? []).find((r) =>
      r.ErrorEquals.includes('Lambda.TooManyRequestsException'),
    );
    expect(lambdaRetry?.ErrorEquals.sort()).toEqual([...LAMBDA_SERVICE_ERRORS].sort());
    expect(lambdaRetry?.MaxAttempts).toBeGreaterThan(0);
    // a throttled AWS call that outlived botocore's retries is retried, not caught as a failure
    const transient = (state.Retry ?? []).find((r) => r.ErrorEquals.includes(TRANSIENT_AWS_ERROR));
    expect(transient?.ErrorEquals).toEqual([TRANSIENT_AWS_ERROR]);
    expect(transient?.MaxAttempts).toBeGreaterThanOrEqual(3);
    expect(transient?.BackoffRate).toBeGreaterThan(1);
    const catches = state.Catch ?? [];
    expect(catches.length).toBeGreaterThan(0);
    expect(catches[catches.length - 1].ErrorEquals).toEqual(['States.ALL']);
    expect(state.ResultPath).toMatch(/^\$\.[a-zA-Z]+$/);
  });

  const FAILURE_CHAIN = new Set(['Teardown after failure', 'Report failure']);
  const WARNINGS_CHAIN = new Set(['Teardown with warnings', 'Report with warnings']);
  const afterDelivery = reachable(definition, 'Delivered');
  const lastCatch = (state: AslState) => state.Catch![state.Catch!.length - 1];
  /** Where an error leads first: a state of the launch attempt ends it; the parent's go to the failure chain. */
  const ATTEMPT_STATES = new Set(Object.keys(stateMachineDefinition(template, 'WorkflowAttempt').States));
  const errorEntry = (name: string) => (ATTEMPT_STATES.has(name) ? 'Attempt ended with an error' : 'Failure');

  test('Delivered follows the snapshot loop; the tasks after it are image, FSR, teardown, report, the warnings chain and (from Register image) the failure chain', () => {
    // the attempt's end leads on to `Attempt outcome?`, whose Default (no error, no dry run) is Delivered
    expect(definition.States['Snapshots: done'].Next).toBe('Attempt done');
    expect(definition.States['Attempt done'].Next).toBe('Attempt outcome?');
    expect(definition.States['Attempt outcome?'].Default).toBe('Delivered');
    expect(definition.States['Delivered'].Type).toBe('Pass');
    const tasksAfter = tasks.filter(([name]) => afterDelivery.has(name)).map(([name]) => name);
    expect(tasksAfter.sort()).toEqual(
      [
        'Register image',
        'Enable fast snapshot restore',
        'Teardown',
        'Report',
        'Teardown with warnings',
        'Report with warnings',
        'Teardown after failure',
        'Report failure',
      ].sort(),
    );
  });

  test('Target is a snapshot?: $.plan.target "snapshot" → the direct snapshots, else Create snapshots; one snapshot loop', () => {
    expect(definition.States['Dry run?'].Default).toBe('Target is a snapshot?');
    const choice = definition.States['Target is a snapshot?'];
    expect(choice.Type).toBe('Choice');
    expect(choice.Choices).toEqual([
      {
        And: [
          { Variable: '$.plan.target', IsPresent: true },
          { Variable: '$.plan.target', StringEquals: 'snapshot' },
        ],
        Next: 'Direct snapshot phase',
      },
    ]);
    expect(choice.Default).toBe('Snapshot phase');
    // both phase marks stamp the one `snapshot` timing key
    for (const phase of ['Direct snapshot phase', 'Snapshot phase']) {
      expect(definition.States[phase].Parameters).toMatchObject({ 'snapshot.$': '$$.State.EnteredTime' });
    }
    expect(definition.States['Direct snapshot phase'].Next).toBe('Direct snapshots');
    expect(definition.States['Direct snapshots']).toEqual({
      Type: 'Pass',
      Comment: expect.any(String),
      Parameters: { 'snapshots.$': '$.command.directSnapshots', completed: false },
      ResultPath: '$.snapshots',
      Next: 'Snapshots: first call',
    });
    expect(definition.States['Snapshot phase'].Next).toBe('Create snapshots');
    expect(definition.States['Create snapshots'].Next).toBe('Snapshots: first call');
    // exactly one poll loop of Check snapshots, entered from both branches only
    const checkSnapshotTasks = tasks.filter(([, state]) => taskModule(template, state) === 'check_snapshots');
    expect(checkSnapshotTasks.map(([name]) => name)).toEqual(['Check snapshots']);
    const into = states.filter(([, state]) => successors(state).includes('Snapshots: first call'));
    expect(into.map(([name]) => name).sort()).toEqual(['Create snapshots', 'Direct snapshots']);
    // the direct branch makes nothing: no Task between the choice and the loop
    expect(
      reachable(definition, 'Direct snapshot phase', ['Snapshots: first call']).has('Create snapshots'),
    ).toBe(false);
  });

  test('before Delivered every task catches into the failure chain, which keeps the original error in $.error', () => {
    const failureStart = definition.States['Failure'];
    expect(failureStart).toMatchObject({ Type: 'Pass', Result: 'failure', ResultPath: '$.outcome' });
    const before = tasks.filter(([name]) => !afterDelivery.has(name) && !FAILURE_CHAIN.has(name));
    expect(before.map(([name]) => name).sort()).toEqual(
      [
        'Prepare',
        'List source blocks',
        'Launch transfer instance',
        'Check instance',
        'Attach volumes',
        'Start compaction',
        'Check compaction',
        'Create snapshots',
        'Check snapshots',
        'Teardown before relaunch',
        // the dry run's own chain (test/cdk/workflow-dry-run.test.ts)
        'Dry run teardown',
        'Dry run report',
      ].sort(),
    );
    for (const [name, state] of before) {
      const last = lastCatch(state);
      expect({ name, next: last.Next, resultPath: last.ResultPath }).toEqual({
        name,
        next: errorEntry(name),
        resultPath: '$.error',
      });
    }
    // the attempt ends with its error at $.error; the parent takes it to the failure chain unless it relaunches
    expect(definition.States['Attempt ended with an error'].Next).toBe('Attempt outcome?');
    expect(definition.States['Attempt outcome?'].Choices![0]).toEqual({
      Variable: '$.error',
      IsPresent: true,
      Next: 'Launch again?',
    });
    expect(definition.States['Launch again?'].Default).toBe('Failure');
    // a child that fails anyway (States.Runtime, its timeout, a stop): the failure chain all the same
    expect(lastCatch(stateMachineDefinition(template).States['Run attempt'])).toEqual({
      ErrorEquals: ['States.ALL'],
      ResultPath: '$.error',
      Next: 'Failure',
    });
    for (const name of FAILURE_CHAIN) {
      expect(lastCatch(definition.States[name]).ResultPath).not.toBe('$.error');
    }
    expect(definition.States['Failed']).toEqual({
      Type: 'Fail',
      ErrorPath: '$.error.Error',
      CausePath: '$.error.Cause',
    });
  });

  test('after Delivered only Register image reaches the failure chain (ImageNotDelivered); every other task catches into the warnings chain', () => {
    // the AMI (and its requested sharing) is a deliverable of an image input: without it the run fails
    const register = definition.States['Register image'];
    expect(lastCatch(register)).toMatchObject({ Next: 'Image not delivered', ResultPath: '$.imageError' });
    expect(definition.States['Image not delivered']).toMatchObject({
      Type: 'Pass',
      Parameters: { Error: 'ImageNotDelivered' },
      ResultPath: '$.error',
      Next: 'Failure',
    });
    expect(String(definition.States['Image not delivered'].Parameters?.['Cause.$'])).toContain(
      'States.JsonToString($.snapshots.snapshots[*].snapshotId)',
    );
    const withoutImage = reachable(definition, 'Delivered', ['Register image']);
    for (const name of ['Failure', 'Teardown after failure', 'Report failure', 'Failed']) {
      expect({ name, reachable: withoutImage.has(name) }).toEqual({ name, reachable: false });
    }
    expect([...withoutImage].filter((name) => definition.States[name].Type === 'Fail')).toEqual([]);
    const fromDelivery = tasks.filter(
      ([n]) =>
        afterDelivery.has(n) && !WARNINGS_CHAIN.has(n) && !FAILURE_CHAIN.has(n) && n !== 'Register image',
    );
    for (const [name, state] of fromDelivery) {
      const last = lastCatch(state);
      expect({ name, next: last.Next, resultPath: last.ResultPath }).toEqual({
        name,
        next: 'Delivered with warnings',
        resultPath: '$.warning',
      });
    }
    expect(definition.States['Teardown: gave up']).toMatchObject({
      Parameters: { Error: 'TeardownIncomplete' },
      ResultPath: '$.warning',
      Next: 'Delivered with warnings',
    });
    // Every teardown after delivery keeps the outputs: outcome success with the new snapshots in keep.
    for (const name of ['Teardown', 'Teardown with warnings']) {
      expect(definition.States[name].Parameters).toEqual({
        'executionName.$': '$$.Execution.Name',
        outcome: 'success',
        keep: { 'snapshotIds.$': '$.snapshots.snapshots[*].snapshotId', 'imageId.$': '$.image.imageId' },
      });
    }
  });

  test('the warnings chain: outcome, teardown, report with warnings, Report unavailable, success', () => {
    expect(definition.States['Delivered with warnings']).toMatchObject({
      Type: 'Pass',
      Result: 'succeeded-with-warnings',
      ResultPath: '$.outcome',
    });
    expect(lastCatch(definition.States['Teardown with warnings'])).toMatchObject({
      Next: 'Warnings: report phase',
      ResultPath: '$.teardownError',
    });
    expect(definition.States['Report with warnings']).toMatchObject({
      ResultPath: '$.report',
      Next: 'Done with warnings',
    });
    expect(definition.States['Report with warnings'].Parameters).toBeUndefined();
    expect(lastCatch(definition.States['Report with warnings'])).toEqual({
      ErrorEquals: ['States.ALL'],
      Next: 'Report unavailable',
      ResultPath: '$.reportError',
    });
    expect(definition.States['Report unavailable']).toMatchObject({
      Type: 'Pass',
      ResultPath: '$.report',
      Next: 'Done with warnings',
      Parameters: {
        outcome: 'succeeded-with-warnings',
        'executionName.$': '$.executionName',
        'newSnapshotIds.$': '$.snapshots.snapshots[*].snapshotId',
        'imageId.$': '$.image.imageId',
        'warning.$': '$.warning',
        'reportError.$': '$.reportError',
      },
    });
    expect(definition.States['Done with warnings']).toEqual({ Type: 'Succeed', OutputPath: '$.report' });
  });

  test('the instance-facing tasks get the attached volumes, not the ready result', () => {
    expect(definition.States['Attach volumes']).toMatchObject({
      Parameters: { 'plan.$': '$.plan', 'instance.$': '$.instance' },
      ResultPath: '$.attached',
    });
    expect(definition.States['Start compaction'].Parameters).toEqual({
      'plan.$': '$.plan',
      'instance.$': '$.instance',
      'attached.$': '$.attached',
      'sourceBlocks.$': '$.sourceBlocks',
      // the direct snapshots' ClientToken is <executionName>-a<launchAttempt>-v<index>
      'launchAttempt.$': '$.launchAttempt',
    });
    expect(definition.States['Create snapshots'].Parameters).toEqual({
      'plan.$': '$.plan',
      'attached.$': '$.attached',
    });
  });

  test('InstanceLost from the instance and compaction checks goes to the relaunch path', () => {
    for (const name of ['Check instance', 'Attach volumes', 'Check compaction']) {
      const first = definition.States[name].Catch![0];
      expect(first).toEqual({
        ErrorEquals: ['InstanceLost'],
        ResultPath: '$.error',
        Next: 'Instance lost: teardown phase',
      });
    }
    // the lost instance is torn down in the attempt, which ends with InstanceLost; the parent launches again
    expect(definition.States['Instance lost: teardown phase'].Next).toBe(
      'Teardown before relaunch: first call',
    );
    expect(definition.States['Teardown before relaunch: done'].Next).toBe('Attempt ended with an error');
    const again = definition.States['Launch again?'];
    expect(again.Choices).toEqual([
      {
        And: [
          { Variable: '$.error.Error', StringEquals: 'InstanceLost' },
          { Variable: '$.launchAttempt', NumericLessThan: 2 },
        ],
        Next: 'Relaunch',
      },
    ]);
    expect(again.Default).toBe('Failure');
  });

  test('every cycle goes through a Choice that stops it when an incremented attempt counter reaches a bound', () => {
    // Cutting the "go round again" edge of every bounded Choice must leave no cycle at all.
    const cut = new Set<string>();
    for (const [name, state] of states) {
      const bound = boundedContinuation(state);
      if (!bound) continue;
      cut.add(`${name}->${bound.edge}`);
      expect({ name, increments: increments(definition.States[bound.edge], bound.counter) }).toEqual({
        name,
        increments: true,
      });
    }
    // sources, blocks, ready, attach, compaction, snapshot, five teardown loops and the relaunch.
    expect(cut.size).toBe(12);
    const names = Object.keys(definition.States);
    expect(cycles(names, (name) => successors(definition.States[name])).length).toBeGreaterThan(0);
    const remaining = cycles(names, (name) =>
      successors(definition.States[name]).filter((next) => !cut.has(`${name}->${next}`)),
    );
    expect(remaining).toEqual([]);
  });

  test('poll loops use the configured interval and bound', () => {
    const loops: [string, string, number, number, string][] = [
      ['Wait for source snapshots', 'sources', 45, 100, 'SnapshotNotCompleted'],
      ['List source blocks', 'blocks', 15, 12, 'BlockListIncomplete'],
      ['Wait until ready', 'ready', 15, 40, 'InstanceNotReady'],
      ['Attach volumes', 'attach', 20, 30, 'VolumesNotAttached'],
      ['Snapshots', 'snapshot', 120, 360, 'SnapshotTimedOut'],
    ];
    for (const [loop, counter, seconds, attempts, error] of loops) {
      expect(definition.States[`${loop}: wait`]).toMatchObject({ Type: 'Wait', Seconds: seconds });
      expect(definition.States[`${loop}: check`].Choices).toContainEqual({
        Variable: `$.polls.${counter}`,
        NumericGreaterThanEquals: attempts,
        Next: `${loop}: gave up`,
      });
      expect(definition.States[`${loop}: gave up`]).toMatchObject({
        Parameters: { Error: error },
        ResultPath: '$.error',
        Next: errorEntry(`${loop}: gave up`),
      });
    }
    // Prepare and Attach volumes are called at once; the cause names what was still missing.
    expect(definition.States['Wait for source snapshots: first call'].Next).toBe('Prepare');
    expect(definition.States['Attach volumes: first call'].Next).toBe('Attach volumes');
    expect(definition.States['Wait for source snapshots: check'].Choices![0]).toEqual({
      Variable: '$.plan.sourcesReady',
      BooleanEquals: true,
      Next: 'Wait for source snapshots: done',
    });
    expect(definition.States['Wait for source snapshots: gave up'].Parameters!['Cause.$']).toMatch(
      /^States\.Format\('Source snapshots still pending after 75 minutes .*States\.JsonToString\(\$\.plan\.pendingSnapshotIds\)\)$/,
    );
    expect(definition.States['Attach volumes: check'].Choices![0]).toMatchObject({
      Variable: '$.attached.done',
      BooleanEquals: true,
    });
  });

  test('the compaction loop reads its interval and bound from the plan, capped at 360 calls', () => {
    expect(definition.States['Compaction: wait']).toEqual({
      Type: 'Wait',
      SecondsPath: '$.plan.compactionPoll.intervalSeconds',
      Next: 'Check compaction',
    });
    const choices = definition.States['Compaction: check'].Choices!;
    expect(choices).toContainEqual({
      Variable: '$.polls.compaction',
      NumericGreaterThanEqualsPath: '$.plan.compactionPoll.maxAttempts',
      Next: 'Compaction: gave up',
    });
    expect(choices).toContainEqual({
      Variable: '$.polls.compaction',
      NumericGreaterThanEquals: 360,
      Next: 'Compaction: gave up',
    });
    expect(definition.States['Compaction: gave up']).toMatchObject({
      Parameters: { Error: 'CompactionTimedOut' },
      ResultPath: '$.error',
      Next: 'Attempt ended with an error',
    });
  });

  test('the block lists are made after the sources are completed and before the launch, resumably', () => {
    expect(definition.States['Wait for source snapshots: done'].Next).toBe('List blocks phase');
    expect(definition.States['List blocks phase'].Parameters!['listBlocks.$']).toBe('$$.State.EnteredTime');
    expect(definition.States['List blocks phase'].Next).toBe('List source blocks: first call');
    // called at once, then after each wait; done when the Lambda says complete
    expect(definition.States['List source blocks: first call'].Next).toBe('List source blocks');
    // `Run attempt` starts the launch attempt (inlined here: its first state)
    expect(definition.States['List source blocks: done'].Next).toBe('Attempt start');
    expect(definition.States['Attempt start'].Next).toBe('Launch phase');
    expect(definition.States['Launch phase'].Next).toBe('Launch transfer instance');
    // each call gets the previous call's result (where to resume) and replaces it
    expect(definition.States['List source blocks']).toMatchObject({
      Parameters: { 'plan.$': '$.plan', 'sourceBlocks.$': '$.sourceBlocks' },
      ResultPath: '$.sourceBlocks',
      Next: 'List source blocks: check',
    });
    expect(definition.States['List source blocks: check'].Choices![0]).toEqual({
      Variable: '$.sourceBlocks.complete',
      BooleanEquals: true,
      Next: 'List source blocks: done',
    });
    // the cause counts the listing slice of each call, not only the waits: 12 x (15 s + 60 s) = 15 minutes
    expect(definition.States['List source blocks: gave up'].Parameters!['Cause.$']).toBe(
      "States.Format('The source snapshots\\' blocks were not all listed in 12 calls (about 15 minutes; {} " +
        "pages read) - raise blockListPollMaxAttempts, or check ListSnapshotBlocks throttling in the account.', " +
        'States.JsonToString($.sourceBlocks.pages))',
    );
  });

  test("the listing slice the messages count (contract/limits.json) leaves room in the Lambda's timeout", () => {
    expect(TASK_TIMEOUTS.list_source_blocks.toSeconds()).toBeGreaterThanOrEqual(
      BLOCK_LIST_SLICE_SECONDS + 60,
    );
  });

  test('a relaunch keeps the block lists (the next attempt fetches the same bundle) and lists nothing again', () => {
    expect(definition.States['Relaunch'].Parameters).toMatchObject({ 'sourceBlocks.$': '$.sourceBlocks' });
    expect(definition.States['Relaunch'].Next).toBe('Attempt start');
    expect(reachable(definition, 'Relaunch').has('List source blocks')).toBe(false);
  });

  test('each phase has a Pass state that stamps $.timings.<phase> with the state entered time', () => {
    for (const phase of PHASES) {
      const stamps = states.filter(
        ([, state]) => state.Type === 'Pass' && state.Parameters?.[`${phase}.$`] === '$$.State.EnteredTime',
      );
      expect({ phase, count: stamps.length > 0 }).toEqual({ phase, count: true });
      for (const [, state] of stamps) expect(state.ResultPath).toBe('$.timings');
    }
  });

  test('the first state sets up the contract state layout', () => {
    expect(definition.StartAt).toBe('Start');
    expect(definition.States['Start'].Parameters).toMatchObject({
      'input.$': '$',
      'executionName.$': '$$.Execution.Name',
      launchAttempt: 1,
      polls: { sources: 0, blocks: 0, ready: 0, attach: 0, compaction: 0, snapshot: 0, teardown: 0 },
      // no block list yet: list_source_blocks starts from scratch
      'sourceBlocks.$': "States.StringToJson('null')",
    });
    expect(Object.keys(definition.States['Start'].Parameters!.polls as object).sort()).toEqual(
      [...POLL_LOOPS].sort(),
    );
  });

  test('the execution output is the report', () => {
    expect(definition.States['Done']).toEqual({ Type: 'Succeed', OutputPath: '$.report' });
  });

  test('the state machine timeout is set from the settings', () => {
    expect(definition.TimeoutSeconds).toBe(48 * 3600);
  });
});

describe('the launch attempt, a child execution of the workflow', () => {
  const template = synthTemplate({
    compactionPollSeconds: 90,
    sourcePollSeconds: 45,
    sourcePollMaxAttempts: 100,
    attachPollSeconds: 20,
    attachPollMaxAttempts: 30,
    blockListPollSeconds: 15,
    blockListPollMaxAttempts: 12,
    maxLaunchAttempts: 2,
  });
  const parent = stateMachineDefinition(template);
  const attempt = stateMachineDefinition(template, 'WorkflowAttempt');
  const machines = template.findResources('AWS::StepFunctions::StateMachine');
  const attemptId = Object.keys(machines).find((id) => id.startsWith('WorkflowAttemptStateMachine'))!;

  test('Run attempt starts it with startExecution.sync:2, the state as input, and takes its output as the state', () => {
    const run = parent.States['Run attempt'];
    expect(run.Resource).toBe('arn:aws:states:::states:startExecution.sync:2');
    expect(run.Parameters).toEqual({
      StateMachineArn: `REF(${attemptId})`,
      // one name per execution and attempt: a retried start finds the running child, never a second one
      'Name.$': "States.Format('{}-attempt-{}', States.Hash($$.Execution.Id, 'MD5'), $.launchAttempt)",
      Input: {
        ...Object.fromEntries(
          [
            'input',
            'executionName',
            'launchAttempt',
            'timings',
            'polls',
            'plan',
            'sourceBlocks',
            'compaction',
          ].map((key) => [`${key}.$`, `$.${key}`]),
        ),
        'AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$': '$$.Execution.Id',
      },
    });
    expect(run.ResultPath).toBeUndefined();
    expect(run.OutputPath).toBe('$.Output');
    expect(run.Retry!.map((r) => r.ErrorEquals)).toEqual([START_EXECUTION_RETRY_ERRORS]);
    expect(attempt.StartAt).toBe('Attempt start');
    expect(Object.keys(attempt.States['Attempt start'].Parameters!).sort()).toEqual(
      Object.keys(run.Parameters!.Input as object)
        .filter((key) => !key.startsWith('AWS_STEP_FUNCTIONS'))
        .sort(),
    );
  });

  test('it never fails on an error of the contract: every catch ends it with the error at $.error', () => {
    expect(Object.values(attempt.States).filter((state) => state.Type === 'Fail')).toEqual([]);
    const ends = Object.entries(attempt.States).filter(([, state]) => state.Type === 'Succeed');
    expect(ends.map(([name]) => name).sort()).toEqual(['Attempt done', 'Attempt ended with an error']);
    for (const [name, state] of Object.entries(attempt.States)) {
      if (state.Type !== 'Task') continue;
      const last = state.Catch![state.Catch!.length - 1];
      expect({ name, last }).toEqual({
        name,
        last: { ErrorEquals: ['States.ALL'], ResultPath: '$.error', Next: 'Attempt ended with an error' },
      });
    }
  });

  test("its tasks tag and tear down by the parent's execution name, never its own", () => {
    for (const [name, state] of Object.entries(attempt.States)) {
      expect({ name, context: JSON.stringify(state.Parameters ?? {}).includes('$$.Execution') }).toEqual({
        name,
        context: false,
      });
    }
    expect(attempt.States['Teardown before relaunch'].Parameters).toMatchObject({
      'executionName.$': '$.executionName',
    });
  });

  test('it may run as long as its parent', () => {
    expect(attempt.TimeoutSeconds).toBe(parent.TimeoutSeconds);
  });

  test("the workflow's role may start, describe and stop the attempts, and the rule .sync uses; nothing more on them", () => {
    const workflowRole = Object.values(machines).find((m) =>
      JSON.stringify(m).includes('WorkflowStateMachineRole'),
    )!.Properties.RoleArn['Fn::GetAtt'][0] as string;
    const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify(p.Properties.Roles).includes(workflowRole),
    );
    const statements = policies.flatMap((p) => p.Properties.PolicyDocument.Statement) as {
      Action: string | string[];
      Resource: unknown;
    }[];
    const about = (prefix: string) =>
      statements
        .filter((st) => [st.Action].flat().some((a) => a.startsWith(prefix)))
        .map((st) => ({ Action: [st.Action].flat().sort(), Resource: JSON.stringify(st.Resource) }));
    const states = about('states:');
    expect(states.map((st) => st.Action)).toEqual([
      ['states:StartExecution'],
      ['states:DescribeExecution', 'states:StopExecution'],
    ]);
    expect(states[0].Resource).toBe(JSON.stringify({ Ref: attemptId }));
    expect(states[1].Resource).toContain(attemptId);
    expect(states[1].Resource).toContain(':execution:');
    const events = about('events:');
    expect(events.map((st) => st.Action)).toEqual([
      ['events:DescribeRule', 'events:PutRule', 'events:PutTargets'],
    ]);
    expect(events[0].Resource).toContain('rule/StepFunctionsGetEventsForStepFunctionsExecutionRule');
  });
});

describe('cleanup state machine definition', () => {
  const template = synthTemplate({ teardownPollSeconds: 20, teardownPollMaxAttempts: 12 });
  const definition = stateMachineDefinition(template, 'Cleanup');
  const modules = Object.entries(template.findResources('AWS::Lambda::Function')).map(([, fn]) => ({
    module: String(fn.Properties.Handler),
    timeout: Number(fn.Properties.Timeout),
  }));

  test('waits past the longest task Lambda of the main workflow, then tears down at once', () => {
    // the launch attempt's tasks too (launch is the longest)
    const workflow = inlinedWorkflowDefinition(template);
    const workflowFunctions = new Set(
      Object.values(workflow.States)
        .filter((state) => state.Type === 'Task')
        .map((state) => taskModule(template, state)),
    );
    const longest = Math.max(
      ...modules
        .filter((m) => workflowFunctions.has(m.module.replace(/^compactor\.handlers\.|\.handler$/g, '')))
        .map((m) => m.timeout),
    );
    expect(longest).toBeGreaterThanOrEqual(300);
    expect(definition.StartAt).toBe('Start');
    expect(definition.States['Start'].Next).toBe('Wait past the longest task');
    const wait = definition.States['Wait past the longest task'];
    expect(wait.Type).toBe('Wait');
    expect(wait.Seconds).toBeGreaterThanOrEqual(longest + 60);
    expect(wait.Next).toBe('Cleanup teardown: first call');
    expect(definition.States['Cleanup teardown: first call'].Next).toBe('Cleanup teardown');
  });

  test('one Task: teardown with outcome cleanup for the ended execution, nothing kept', () => {
    const tasks = Object.entries(definition.States).filter(([, state]) => state.Type === 'Task');
    expect(tasks.map(([name]) => name)).toEqual(['Cleanup teardown']);
    const [, task] = tasks[0];
    expect(taskModule(template, task)).toBe('teardown');
    expect(task.Parameters).toEqual({
      'executionName.$': '$.executionName',
      outcome: 'cleanup',
      keep: { snapshotIds: [], 'imageId.$': "States.StringToJson('null')" },
    });
    expect(task.ResultPath).toBe('$.teardown');
    expect(task.Catch!.at(-1)).toEqual({
      ErrorEquals: ['States.ALL'],
      ResultPath: '$.error',
      Next: 'Cleanup failed',
    });
  });

  test('until nothing remains (Succeed with the result), bounded by teardownPoll (Fail TeardownIncomplete)', () => {
    const check = definition.States['Cleanup teardown: check'];
    expect(check.Choices).toEqual([
      { Variable: '$.teardown.remaining', NumericEquals: 0, Next: 'Cleanup teardown: done' },
      { Variable: '$.polls.teardown', NumericGreaterThanEquals: 12, Next: 'Cleanup teardown: gave up' },
    ]);
    expect(definition.States['Cleanup teardown: wait']).toMatchObject({ Seconds: 20 });
    expect(definition.States['Cleanup teardown: done'].Next).toBe('Cleaned up');
    expect(definition.States['Cleaned up']).toEqual({ Type: 'Succeed', OutputPath: '$.teardown' });
    expect(definition.States['Cleanup teardown: gave up']).toMatchObject({
      Parameters: { Error: 'TeardownIncomplete' },
      ResultPath: '$.error',
      Next: 'Cleanup failed',
    });
    expect(definition.States['Cleanup failed']).toEqual({
      Type: 'Fail',
      ErrorPath: '$.error.Error',
      CausePath: '$.error.Cause',
    });
  });

  test('the state machine has a timeout longer than its wait and teardown bound', () => {
    expect(definition.TimeoutSeconds).toBeGreaterThan(360 + 12 * 20);
  });
});
