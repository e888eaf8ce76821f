import { Duration } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as tasks from 'aws-cdk-lib/aws-stepfunctions-tasks';
import { Construct } from 'constructs';
import contractErrors from '../contract/errors.json';
import contract from '../contract/tasks.json';
import { PollLoopSettings } from './settings';

/** Errors of the Lambda service itself (not of the handler): always worth a retry. */
export const LAMBDA_SERVICE_ERRORS = [
  'Lambda.ServiceException',
  'Lambda.AWSLambdaException',
  'Lambda.SdkClientException',
  'Lambda.TooManyRequestsException',
  'Lambda.ClientExecutionTimeoutException',
];

/** The error name if contract/errors.json lists it; an unlisted name fails the synth. */
export function contractError(name: string): string {
  if (!contractErrors.errors.some((e) => e.name === name)) {
    throw new Error(`Error "${name}" is not in contract/errors.json`);
  }
  return name;
}

/**
 * What a handler raises when AWS still throttles or answers 5xx after botocore's retries
 * (compactor.errors.TransientAwsError): worth retrying the whole task after a pause.
 */
export const TRANSIENT_AWS_ERROR = contractError('TransientAwsError');

/** Keys of `$.timings` (docs/contract.md): `start` plus one per phase. */
export const PHASES: readonly string[] = contract.phases;
export type Phase = string;

/** Keys of `$.polls`: the call counter of each poll loop. */
export const POLL_LOOPS: readonly string[] = contract.pollLoops;
export type PollLoop = string;

/** The value at a JSONPath of the state, whatever its type. */
export const $ = (path: string) => sfn.JsonPath.objectAt(path);

/**
 * Errors of StartExecution worth another try: throttling and the open-executions quota. Step Functions names an
 * integrated service's error after its SDK exception class (`StepFunctions.ExecutionLimitExceededException`), so
 * both spellings are matched. Anything else (`StepFunctions.ExecutionAlreadyExistsException`, a failed child:
 * States.TaskFailed) goes to the state's Catch.
 */
export const START_EXECUTION_RETRY_ERRORS = [
  'StepFunctions.ThrottlingException',
  'StepFunctions.ExecutionLimitExceeded',
  'StepFunctions.ExecutionLimitExceededException',
];

/** The one Retry of every startExecution.sync:2 Task (the batch's items, the compaction's attempts). */
export function retryStartExecution(task: tasks.StepFunctionsStartExecution): void {
  task.addRetry({
    errors: START_EXECUTION_RETRY_ERRORS,
    interval: Duration.seconds(5),
    maxAttempts: 8,
    backoffRate: 2,
    maxDelay: Duration.seconds(300),
    jitterStrategy: sfn.JitterType.FULL,
  });
}

/** CDK drops null from Parameters; this intrinsic yields a JSON null at run time. */
export const JSON_NULL = sfn.JsonPath.stringToJson('null');

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * The state machines of the task table: the compaction workflow, its launch attempts (a child execution each),
 * the cleanup after a failed one, the batch.
 */
export type StateMachineName = 'main' | 'attempt' | 'cleanup' | 'batch';

/** One Task state of contract/tasks.json: what it sends its Lambda and where the result goes. */
export interface TaskStateEntry {
  readonly state: string;
  readonly stateMachine: StateMachineName;
  /** `"$"` = the whole state (no Parameters); else an object whose `$...` strings are JSONPaths. */
  readonly payload: Json;
  readonly resultPath: string;
}

/** One Lambda of contract/tasks.json and the Task states that call it. */
export interface TaskEntry {
  readonly module: string;
  readonly timeoutSeconds: number;
  readonly workflow: boolean;
  readonly summary: string;
  readonly states: readonly TaskStateEntry[];
}

/** The task table (contract/tasks.json), in workflow order. */
export const TASK_TABLE: readonly TaskEntry[] = contract.tasks as readonly TaskEntry[];

/** The table's entry of a Task state and the module it calls; unknown states fail the synth. */
export function taskStateOf(machine: StateMachineName, state: string): TaskStateEntry & { module: string } {
  for (const task of TASK_TABLE) {
    const found = task.states.find((s) => s.state === state && s.stateMachine === machine);
    if (found) return { ...found, module: task.module };
  }
  throw new Error(`Task state "${state}" of the ${machine} state machine is not in contract/tasks.json`);
}

/** A payload value of the table as CDK renders it: `$...` a JSONPath, null a JSON null, else a literal. */
function payloadValue(value: Json): unknown {
  if (value === null) return JSON_NULL;
  if (typeof value === 'string' && value.startsWith('$')) return sfn.JsonPath.stringAt(value);
  if (Array.isArray(value)) return value.map(payloadValue);
  if (typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, v]) => [key, payloadValue(v)]));
  }
  return value;
}

/** The Task's payload; undefined for `"$"` (a JSONPath "$" payload would be rendered wrongly). */
export function taskInput(payload: Json): sfn.TaskInput | undefined {
  if (payload === '$') return undefined;
  return sfn.TaskInput.fromObject(payloadValue(payload) as Record<string, unknown>);
}

function checkKnown(kind: string, known: readonly string[], name: string): void {
  if (!known.includes(name)) throw new Error(`${kind} "${name}" is not in contract/tasks.json`);
}

/** Where a failed or timed-out step leaves its error and where the execution goes next. */
export interface ErrorRoute {
  readonly next: sfn.IChainable;
  /** `$.error` on the main path; the failure chain keeps the original error and stores later ones apart. */
  readonly resultPath: string;
}

/** A Catch for named errors that need their own path (e.g. InstanceLost → relaunch). */
export interface SpecificCatch {
  readonly errors: string[];
  readonly route: ErrorRoute;
}

/**
 * A bound read from the state at run time (e.g. the plan sizes the compaction poll from the bytes to copy),
 * with a fixed cap on the calls that holds whatever the state says (the history budget counts on it).
 */
export interface PathBound {
  /** JSONPath of the seconds between two calls (a Wait SecondsPath). */
  readonly intervalSecondsPath: string;
  /** JSONPath of the number of calls before the loop gives up. */
  readonly maxAttemptsPath: string;
  /** The loop gives up at this many calls even if the state allows more. */
  readonly maxAttemptsCap: number;
}

export interface PollLoopOptions {
  /** Prefix of the loop's state names, e.g. "Wait until ready". */
  readonly name: string;
  readonly counter: PollLoop;
  /** Fixed (stack settings) or read from the state. */
  readonly bound: PollLoopSettings | PathBound;
  /** Called once per iteration; its retry and catch are already set. */
  readonly task: sfn.TaskStateBase;
  /** True when the task reports that the awaited thing happened. */
  readonly done: sfn.Condition;
  /** The error the loop fails with when the bound is reached. */
  readonly timeoutError: string;
  readonly timeoutCause: string;
  readonly onTimeout: ErrorRoute;
  /** Sleep before the first call (true for things that take a while to start). */
  readonly waitFirst: boolean;
}

/**
 * The small set of state shapes the workflow is built from, each defined once: a Lambda task with retry
 * and catch, a phase timestamp, a bounded poll loop.
 */
export class WorkflowBuilder {
  constructor(
    private readonly scope: Construct,
    /** Which state machine's Task states of the table this builder makes. */
    private readonly machine: StateMachineName,
    /** The Lambda of each module the table's states call. */
    private readonly functions: Readonly<Partial<Record<string, lambda.IFunction>>>,
  ) {}

  /**
   * The Task state `state` of contract/tasks.json: it invokes the function ARN of the table's module
   * directly with the table's payload, so the state stores the handler's return value as is at the table's
   * resultPath; it retries Lambda service errors with backoff, routes the named errors of `specificCatches`
   * their way and every other error to `onError`.
   */
  task(state: string, onError: ErrorRoute, specificCatches: SpecificCatch[] = []): tasks.LambdaInvoke {
    const entry = taskStateOf(this.machine, state);
    const fn = this.functions[entry.module];
    if (!fn) throw new Error(`Task state "${state}" calls ${entry.module}, which this builder was not given`);
    const task = new tasks.LambdaInvoke(this.scope, state, {
      lambdaFunction: fn,
      payload: taskInput(entry.payload),
      payloadResponseOnly: true,
      retryOnServiceExceptions: false,
      resultPath: entry.resultPath,
    });
    task.addRetry({
      errors: LAMBDA_SERVICE_ERRORS,
      interval: Duration.seconds(2),
      maxAttempts: 6,
      backoffRate: 2,
      maxDelay: Duration.seconds(60),
      jitterStrategy: sfn.JitterType.FULL,
    });
    task.addRetry({
      errors: [TRANSIENT_AWS_ERROR],
      interval: Duration.seconds(10),
      maxAttempts: 5,
      backoffRate: 2,
      maxDelay: Duration.seconds(120),
      jitterStrategy: sfn.JitterType.FULL,
    });
    // Step Functions takes the first matching Catch, and States.ALL must come last.
    for (const c of specificCatches) {
      task.addCatch(c.route.next, { errors: c.errors, resultPath: c.route.resultPath });
    }
    task.addCatch(onError.next, { errors: [sfn.Errors.ALL], resultPath: onError.resultPath });
    return task;
  }

  /** Writes the time the phase began to `$.timings.<phase>` (JSONPath cannot set one key of an object, so it rewrites all of them). */
  markPhase(id: string, phase: Phase): sfn.Pass {
    checkKnown('Phase', PHASES, phase);
    return new sfn.Pass(this.scope, id, {
      comment: `timings.${phase} = when this phase began`,
      parameters: Object.fromEntries(
        ['start', ...PHASES].map((key) => [
          key,
          key === phase ? sfn.JsonPath.stateEnteredTime : sfn.JsonPath.stringAt(`$.timings.${key}`),
        ]),
      ),
      resultPath: '$.timings',
    });
  }

  /** Sets one counter of `$.polls` (reset to 1 before the first call, or + 1) and keeps the others. */
  private setCounter(id: string, counter: PollLoop, mode: 'reset' | 'increment'): sfn.Pass {
    checkKnown('Poll loop', POLL_LOOPS, counter);
    return new sfn.Pass(this.scope, id, {
      parameters: Object.fromEntries(
        POLL_LOOPS.map((key) => [
          key,
          key !== counter
            ? sfn.JsonPath.numberAt(`$.polls.${key}`)
            : mode === 'reset'
              ? 1
              : sfn.JsonPath.mathAdd(sfn.JsonPath.numberAt(`$.polls.${key}`), 1),
        ]),
      ),
      resultPath: '$.polls',
    });
  }

  /**
   * Puts `{"Error", "Cause"}` where the route keeps errors, then follows the route. The cause may be a
   * JsonPath token (e.g. JsonPath.format) to name what was still missing.
   */
  raise(id: string, error: string, cause: string, route: ErrorRoute, comment?: string): sfn.Pass {
    const pass = new sfn.Pass(this.scope, id, {
      comment,
      parameters: { Error: contractError(error), Cause: cause },
      resultPath: route.resultPath,
    });
    pass.next(route.next);
    return pass;
  }

  /**
   * reset counter → [Wait] → task → Choice: done → (chain end) | counter >= bound → timeout error |
   * otherwise counter + 1 → Wait → task. The state machine timeout bounds the total on top.
   */
  pollLoop(o: PollLoopOptions): sfn.Chain {
    const counter = `$.polls.${o.counter}`;
    const fixed = 'maxAttempts' in o.bound ? o.bound : undefined;
    const byPath = 'maxAttemptsPath' in o.bound ? o.bound : undefined;
    const reset = this.setCounter(`${o.name}: first call`, o.counter, 'reset');
    const wait = new sfn.Wait(this.scope, `${o.name}: wait`, {
      time: fixed
        ? sfn.WaitTime.duration(Duration.seconds(fixed.intervalSeconds))
        : sfn.WaitTime.secondsPath(byPath!.intervalSecondsPath),
    });
    const increment = this.setCounter(`${o.name}: count call`, o.counter, 'increment');
    const done = new sfn.Pass(this.scope, `${o.name}: done`);
    const timedOut = this.raise(
      `${o.name}: gave up`,
      o.timeoutError,
      o.timeoutCause,
      o.onTimeout,
      fixed
        ? `${fixed.maxAttempts} calls ${fixed.intervalSeconds} s apart`
        : `${byPath!.maxAttemptsPath} calls (at most ${byPath!.maxAttemptsCap}) ${byPath!.intervalSecondsPath} s apart`,
    );
    const check = new sfn.Choice(this.scope, `${o.name}: check`).when(o.done, done);
    if (fixed) {
      check.when(sfn.Condition.numberGreaterThanEquals(counter, fixed.maxAttempts), timedOut);
    } else {
      check
        .when(sfn.Condition.numberGreaterThanEqualsJsonPath(counter, byPath!.maxAttemptsPath), timedOut)
        .when(sfn.Condition.numberGreaterThanEquals(counter, byPath!.maxAttemptsCap), timedOut);
    }
    check.otherwise(increment);
    reset.next(o.waitFirst ? wait : o.task);
    wait.next(o.task);
    o.task.next(check);
    increment.next(wait);
    return sfn.Chain.custom(reset, [done], done);
  }

  /**
   * The teardown Task state `state` called until nothing of the execution remains; an error or the bound
   * follows `route` (every teardown loop of both state machines is one of these).
   */
  teardownLoop(state: string, bound: PollLoopSettings, route: ErrorRoute, timeoutCause: string): sfn.Chain {
    return this.pollLoop({
      name: state,
      counter: 'teardown',
      bound,
      task: this.task(state, route),
      done: sfn.Condition.numberEquals('$.teardown.remaining', 0),
      timeoutError: 'TeardownIncomplete',
      timeoutCause,
      onTimeout: route,
      waitFirst: false,
    });
  }
}
