import { LAMBDA_SERVICE_ERRORS, PHASES } from '../../lib/workflow-building-blocks';
import { AslState, stateMachineDefinition, synthTemplate, taskModule } from './support';

/** Every state a state can go to next (Next, Choice branches, Default, Catch targets). */
function successors(state: AslState): string[] {
  return [
    ...(state.Next ? [state.Next] : []),
    ...(state.Choices ?? []).map((choice) => choice.Next),
    ...(state.Default ? [state.Default] : []),
    ...(state.Catch ?? []).map((c) => c.Next),
  ];
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
 * fixed number: `>= bound` exits (Default continues) or `< bound` continues (Default exits).
 */
function boundedContinuation(state: AslState): { counter: string; edge: string } | undefined {
  if (state.Type !== 'Choice') return undefined;
  for (const rule of state.Choices ?? []) {
    const counter = /^\$\.(polls\.[a-zA-Z]+|launchAttempt)$/.exec(String(rule.Variable));
    if (!counter) continue;
    if (typeof rule.NumericGreaterThanEquals === 'number')
      return { counter: counter[1], edge: state.Default! };
    if (typeof rule.NumericLessThan === 'number') return { counter: counter[1], edge: rule.Next };
  }
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
    compactionPollMaxAttempts: 200,
    maxLaunchAttempts: 4,
  });
  const definition = stateMachineDefinition(template);
  const states = Object.entries(definition.States);
  const tasks = states.filter(([, state]) => state.Type === 'Task');

  test('one Task per contract step, each running a stack function', () => {
    const modules = new Set(tasks.map(([, state]) => taskModule(template, state)));
    expect([...modules].sort()).toEqual(
      [
        'prepare',
        'launch',
        'check_instance',
        'start_compaction',
        'check_compaction',
        'create_snapshots',
        'check_snapshots',
        'register_image',
        'enable_fast_snapshot_restore',
        'teardown',
        'report',
      ].sort(),
    );
  });

  test.each(tasks)('Task "%s" retries Lambda service errors and catches everything last', (_name, state) => {
    const lambdaRetry = (state.Retry ?? []).find((r) =>
      r.ErrorEquals.includes('Lambda.TooManyRequestsException'),
    );
    expect(lambdaRetry?.ErrorEquals.sort()).toEqual([...LAMBDA_SERVICE_ERRORS].sort());
    expect(lambdaRetry?.MaxAttempts).toBeGreaterThan(0);
    const catches = state.Catch ?? [];
    expect(catches.length).toBeGreaterThan(0);
    expect(catches[catches.length - 1].ErrorEquals).toEqual(['States.ALL']);
    expect(state.ResultPath).toMatch(/^\$\.[a-zA-Z]+$/);
  });

  test('main-path tasks catch into the failure chain, which keeps the original error in $.error', () => {
    const failureStart = definition.States['Failure'];
    expect(failureStart).toMatchObject({ Type: 'Pass', Result: 'failure', ResultPath: '$.outcome' });
    const chainTasks = new Set(['Teardown after failure', 'Report failure']);
    for (const [name, state] of tasks.filter(([n]) => !chainTasks.has(n))) {
      const last = state.Catch![state.Catch!.length - 1];
      expect({ name, next: last.Next, resultPath: last.ResultPath }).toEqual({
        name,
        next: 'Failure',
        resultPath: '$.error',
      });
    }
    for (const name of chainTasks) {
      const last = definition.States[name].Catch!.at(-1)!;
      expect(last.ResultPath).not.toBe('$.error');
    }
    expect(definition.States['Failed']).toEqual({
      Type: 'Fail',
      ErrorPath: '$.error.Error',
      CausePath: '$.error.Cause',
    });
  });

  test('InstanceLost from the instance and compaction checks goes to the relaunch path', () => {
    for (const name of ['Check instance', 'Check compaction']) {
      const first = definition.States[name].Catch![0];
      expect(first).toEqual({
        ErrorEquals: ['InstanceLost'],
        ResultPath: '$.error',
        Next: 'Instance lost: teardown phase',
      });
    }
    const again = definition.States['Launch again?'];
    expect(again.Choices).toEqual([{ Variable: '$.launchAttempt', NumericLessThan: 4, Next: 'Relaunch' }]);
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
    // ready, compaction, snapshot, three teardown loops and the relaunch.
    expect(cut.size).toBe(7);
    const names = Object.keys(definition.States);
    expect(cycles(names, (name) => successors(definition.States[name])).length).toBeGreaterThan(0);
    const remaining = cycles(names, (name) =>
      successors(definition.States[name]).filter((next) => !cut.has(`${name}->${next}`)),
    );
    expect(remaining).toEqual([]);
  });

  test('poll loops use the configured interval and bound', () => {
    expect(definition.States['Compaction: wait']).toMatchObject({ Type: 'Wait', Seconds: 90 });
    expect(definition.States['Compaction: check'].Choices).toContainEqual({
      Variable: '$.polls.compaction',
      NumericGreaterThanEquals: 200,
      Next: 'Compaction: gave up',
    });
    expect(definition.States['Compaction: gave up']).toMatchObject({
      Parameters: { Error: 'CompactionTimedOut' },
      ResultPath: '$.error',
      Next: 'Failure',
    });
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
      polls: { ready: 0, compaction: 0, snapshot: 0, teardown: 0 },
    });
  });

  test('the execution output is the report', () => {
    expect(definition.States['Done']).toEqual({ Type: 'Succeed', OutputPath: '$.report' });
  });

  test('the state machine timeout is set from the settings', () => {
    expect(definition.TimeoutSeconds).toBe(48 * 3600);
  });
});
