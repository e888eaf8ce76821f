/**
 * The worst-case history of each execution, computed from the synthesized definitions: the compaction workflow
 * (the parent) and one launch attempt (its child execution). Every state counts the events Step Functions
 * writes for it; every cycle runs as often as the counter Choice on it allows; the longest path through the
 * rest counts once. Each must stay under half the limit (HISTORY_EVENT_BUDGET) at the largest settings
 * lib/settings.ts accepts, and the synth's own estimate (worstCaseHistoryEvents) must never be below it.
 * Task retries are not counted: each is bounded, and the other half of the limit is theirs.
 */
import { Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import contractLimits from '../../contract/limits.json';
import contractSettings from '../../contract/settings.json';
import {
  HISTORY_EVENT_BUDGET,
  HISTORY_EVENT_LIMIT,
  PARENT_EVENTS_PER_ATTEMPT,
  readSettings,
  Settings,
  SettingsError,
  worstCaseHistoryEvents,
} from '../../lib/settings';
import { CompactionWorkflow } from '../../lib/workflow';
import { TASK_TABLE } from '../../lib/workflow-building-blocks';
import { AslDefinition, AslState, successors } from './support';

type Context = Record<string, unknown>;
type Rule = Record<string, unknown>;

const read = (context: Context): Settings => readSettings({ tryGetContext: (key) => context[key] });

/** Events Step Functions writes for one pass through a state (the execution adds its own two). */
export function stateEvents(state: AslState): number {
  if (state.Type === 'Task') {
    // entered, scheduled, started, succeeded/failed, exited; a .sync child adds TaskSubmitted
    return /:states:::states:startExecution\.sync/.test(state.Resource ?? '') ? 6 : 5;
  }
  if (state.Type === 'Fail') return 1;
  return 2; // entered + exited: Pass, Choice, Wait, Succeed
}

/** The fixed numbers a Choice compares an attempt counter with (And/Or/Not rules included). */
function counterBounds(rule: Rule): number[] {
  const nested = ['And', 'Or'].flatMap((op) =>
    ((rule[op] as Rule[] | undefined) ?? []).flatMap(counterBounds),
  );
  const not = rule.Not ? counterBounds(rule.Not as Rule) : [];
  const counter = /^\$\.(polls\.[a-zA-Z]+|launchAttempt)$/.test(String(rule.Variable));
  const own = ['NumericGreaterThanEquals', 'NumericLessThan']
    .map((op) => rule[op])
    .filter((n): n is number => counter && typeof n === 'number');
  return [...nested, ...not, ...own];
}

/** Strongly connected components (Tarjan), each state's component index. */
function components(definition: AslDefinition): Map<string, number> {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const component = new Map<string, number>();
  const stack: string[] = [];
  let counter = 0;
  let count = 0;
  const visit = (name: string) => {
    index.set(name, counter);
    low.set(name, counter++);
    stack.push(name);
    for (const next of successors(definition.States[name])) {
      if (!index.has(next)) {
        visit(next);
        low.set(name, Math.min(low.get(name)!, low.get(next)!));
      } else if (!component.has(next)) {
        low.set(name, Math.min(low.get(name)!, index.get(next)!));
      }
    }
    if (low.get(name) === index.get(name)) {
      let member: string;
      do {
        member = stack.pop()!;
        component.set(member, count);
      } while (member !== name);
      count++;
    }
  };
  for (const name of Object.keys(definition.States)) if (!index.has(name)) visit(name);
  return component;
}

/**
 * The most events one execution of `definition` can write: a cycle (a poll loop, the relaunch) counts all its
 * states as often as its bound (the smallest fixed number its counter Choices compare with; a cycle without
 * one fails the test), then the longest path from StartAt through the cycles and states.
 */
export function worstCaseEvents(definition: AslDefinition): number {
  const of = components(definition);
  const members = new Map<number, string[]>();
  for (const [name, c] of of) members.set(c, [...(members.get(c) ?? []), name]);
  const weight = new Map<number, number>();
  for (const [c, names] of members) {
    const events = names.reduce((sum, name) => sum + stateEvents(definition.States[name]), 0);
    const cyclic = names.length > 1 || successors(definition.States[names[0]]).includes(names[0]);
    if (!cyclic) {
      weight.set(c, events);
      continue;
    }
    const bounds = names.flatMap((name) => (definition.States[name].Choices ?? []).flatMap(counterBounds));
    if (bounds.length === 0) throw new Error(`the cycle ${names.join(' → ')} has no counter bound`);
    weight.set(c, Math.min(...bounds) * events);
  }
  const longest = new Map<number, number>();
  const from = (c: number): number => {
    if (!longest.has(c)) {
      const next = new Set(
        members.get(c)!.flatMap((name) => successors(definition.States[name]).map((n) => of.get(n)!)),
      );
      next.delete(c);
      longest.set(c, weight.get(c)! + Math.max(0, ...[...next].map(from)));
    }
    return longest.get(c)!;
  };
  return 2 + from(of.get(definition.StartAt)!);
}

/** The compaction workflow and its attempt, built alone (stand-in functions) with the given settings. */
function definitions(settings: Settings): { parent: AslDefinition; attempt: AslDefinition } {
  const stack = new Stack();
  const functions = Object.fromEntries(
    TASK_TABLE.map((task) => [
      task.module,
      lambda.Function.fromFunctionArn(
        stack,
        task.module,
        `arn:aws:lambda:us-east-1:111122223333:function:${task.module}`,
      ),
    ]),
  );
  const logGroup = new logs.LogGroup(stack, 'Logs');
  const workflow = new CompactionWorkflow(stack, 'Workflow', { settings, functions, logGroup });
  const template = Template.fromStack(stack);
  const definitionOf = (machine: { node: { defaultChild?: unknown } }): AslDefinition => {
    const id = stack.getLogicalId(machine.node.defaultChild as never);
    const raw = template.toJSON().Resources[id].Properties.DefinitionString;
    const parts: unknown[] = raw['Fn::Join'] ? raw['Fn::Join'][1] : [raw];
    return JSON.parse(parts.map((p) => (typeof p === 'string' ? p : 'TOKEN')).join('')) as AslDefinition;
  };
  return {
    parent: definitionOf(workflow.stateMachine),
    attempt: definitionOf(workflow.attempt.stateMachine),
  };
}

/** The largest `<loop>MaxAttempts` the settings accept with `base` (else every other key at its default). */
function largestAccepted(key: string, base: Context = {}): number {
  let [lo, hi] = [1, contractLimits.limits.pollMaxAttemptsMax.value];
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    try {
      read({ ...base, [key]: mid });
      lo = mid;
    } catch (error) {
      if (!(error instanceof SettingsError)) throw error;
      hi = mid - 1;
    }
  }
  return lo;
}

const POLL_LOOP_KEYS = Object.entries(contractSettings.settings)
  .filter(
    ([, spec]) => typeof spec.default === 'object' && spec.default !== null && 'maxAttempts' in spec.default,
  )
  .map(([key]) => `${key}MaxAttempts`);

const MOST_ATTEMPTS = { maxLaunchAttempts: contractLimits.limits.maxLaunchAttemptsMax.value };
const CASES: [string, Context][] = [
  ['the defaults', {}],
  ['maxLaunchAttempts at its maximum', MOST_ATTEMPTS],
  ...POLL_LOOP_KEYS.map((key): [string, Context] => [
    `${key} at the most the budget accepts, with the most launch attempts`,
    { ...MOST_ATTEMPTS, [key]: largestAccepted(key, MOST_ATTEMPTS) },
  ]),
];

describe('worst-case history of the compaction workflow and of one launch attempt', () => {
  test('the budget is half the Step Functions limit', () => {
    expect(HISTORY_EVENT_BUDGET).toBe(HISTORY_EVENT_LIMIT / 2);
    expect(POLL_LOOP_KEYS.sort()).toEqual(
      [
        'attachPollMaxAttempts',
        'blockListPollMaxAttempts',
        'readyPollMaxAttempts',
        'snapshotPollMaxAttempts',
        'sourcePollMaxAttempts',
        'teardownPollMaxAttempts',
      ].sort(),
    );
  });

  test.each(CASES)(
    '%s: each execution stays under half the limit and within the synth estimate',
    (_n, context) => {
      const settings = read(context);
      const { parent, attempt } = definitions(settings);
      const computed = { parent: worstCaseEvents(parent), attempt: worstCaseEvents(attempt) };
      const estimate = worstCaseHistoryEvents(settings);
      expect(computed.parent).toBeLessThanOrEqual(HISTORY_EVENT_BUDGET);
      expect(computed.attempt).toBeLessThanOrEqual(HISTORY_EVENT_BUDGET);
      expect(computed.parent).toBeLessThanOrEqual(estimate.parent);
      expect(computed.attempt).toBeLessThanOrEqual(estimate.attempt);
    },
  );

  test('a bound past the budget is refused at synth, naming the execution', () => {
    const key = 'snapshotPollMaxAttempts';
    expect(() => read({ [key]: largestAccepted(key) + 1 })).toThrow(
      /one launch attempt execution, over the budget of 12500/,
    );
    expect(() => read({ sourcePollMaxAttempts: 5000 })).toThrow(/one compaction workflow execution/);
  });

  test("one more launch attempt adds the parent's states of an attempt, and nothing to the attempt's history", () => {
    const two = definitions(read({ maxLaunchAttempts: 2 }));
    const three = definitions(read({ maxLaunchAttempts: 3 }));
    expect(worstCaseEvents(three.parent) - worstCaseEvents(two.parent)).toBe(PARENT_EVENTS_PER_ATTEMPT);
    expect(worstCaseEvents(three.attempt)).toBe(worstCaseEvents(two.attempt));
  });

  test('each poll loop costs its bound times its states, in the execution that runs it', () => {
    const base = definitions(read({}));
    const more = definitions(read({ readyPollMaxAttempts: 41, sourcePollMaxAttempts: 361 }));
    // a poll iteration: Wait, Lambda Task, Choice, counter Pass
    expect(worstCaseEvents(more.attempt) - worstCaseEvents(base.attempt)).toBe(11);
    expect(worstCaseEvents(more.parent) - worstCaseEvents(base.parent)).toBe(11);
  });

  test('a cycle without a counter bound is refused', () => {
    const loop: AslDefinition = {
      StartAt: 'A',
      States: { A: { Type: 'Pass', Next: 'B' }, B: { Type: 'Choice', Choices: [], Default: 'A' } },
    };
    expect(() => worstCaseEvents(loop)).toThrow(/the cycle .* has no counter bound/);
  });
});
