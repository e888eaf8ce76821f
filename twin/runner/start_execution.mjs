// Step Functions' StartExecution integration (arn:aws:states:::states:startExecution[.sync[:2]])
// for the twin's runner: the child is a real twin execution of another state machine of the same
// deployment (run.mjs gives `runChild`, which runs it as its own runner process against the same
// emulator).
//
// - Parameters: StateMachineArn (one of the job's state machines, else
//   StepFunctions.StateMachineDoesNotExistException), Name (default a UUID), Input (object or JSON
//   string; what the Task's Parameters built, e.g. AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID).
// - Names are idempotent as in StartExecution: the same name with the same input while that
//   execution runs is the same execution (the Task waits for it too); a closed one with that name,
//   or a running one with another input -> StepFunctions.ExecutionAlreadyExistsException.
// - .sync:2 returns DescribeExecution's fields with Output parsed as JSON (.sync: Output as a JSON
//   string); StartDate/StopDate are epoch milliseconds. A child that ends FAILED, TIMED_OUT or
//   ABORTED fails the Task with States.TaskFailed and the DescribeExecution JSON (with the child's
//   Error and Cause) as its Cause.
// - The request-response form returns {ExecutionArn, StartDate} at once; the child runs on and
//   run.mjs waits for it before it reports.
import { randomUUID } from 'node:crypto';

import { StatesError } from './payload.mjs';

const RESOURCE = /^arn:aws:states:::states:startExecution(\.sync(:2)?)?$/;
const NAME = /^[A-Za-z0-9_-]{1,80}$/;

export function isStartExecution(resource) {
  return typeof resource === 'string' && RESOURCE.test(resource);
}

/** Executions started in this runner process (and its Map children), by state machine and name. */
const executions = new Map();
export const started = [];

function describe(record, pattern) {
  const out = {
    ExecutionArn: record.executionArn,
    StateMachineArn: record.stateMachineArn,
    Name: record.name,
    Status: record.status,
    StartDate: record.startedAt,
    StopDate: record.stoppedAt,
    Input: record.inputText,
    InputDetails: { Included: true },
  };
  if (record.status === 'SUCCEEDED') {
    out.Output = pattern === ':2' ? record.output : JSON.stringify(record.output);
    out.OutputDetails = { Included: true };
  } else {
    out.Error = record.error;
    out.Cause = record.cause;
  }
  return out;
}

function parseInput(input) {
  if (input === undefined || input === null) return {};
  if (typeof input !== 'string') return input;
  try {
    return JSON.parse(input);
  } catch {
    throw new StatesError(
      'StepFunctions.InvalidExecutionInputException',
      `Input is not JSON: ${input.slice(0, 200)}`,
    );
  }
}

function startChild(params, env) {
  const machine = env.machines[params.StateMachineArn];
  if (!machine) {
    throw new StatesError(
      'StepFunctions.StateMachineDoesNotExistException',
      `State Machine Does Not Exist: '${params.StateMachineArn}'`,
    );
  }
  const name = params.Name ?? randomUUID();
  if (!NAME.test(name)) {
    throw new StatesError('StepFunctions.InvalidNameException', `Invalid Name: '${name}'`);
  }
  const input = parseInput(params.Input);
  const inputText = JSON.stringify(input);
  const key = `${params.StateMachineArn}\n${name}`;
  const existing = executions.get(key);
  if (existing) {
    if (existing.status === 'RUNNING' && existing.inputText === inputText) return existing;
    throw new StatesError(
      'StepFunctions.ExecutionAlreadyExistsException',
      `Execution Already Exists: '${existing.executionArn}'`,
    );
  }
  const executionArn = `${params.StateMachineArn.replace(':stateMachine:', ':execution:')}:${name}`;
  const record = {
    executionArn,
    stateMachineArn: params.StateMachineArn,
    name,
    input,
    inputText,
    status: 'RUNNING',
    startedAt: Date.now(),
    stoppedAt: null,
    output: null,
    error: null,
    cause: null,
    parent: input.AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID ?? null,
  };
  executions.set(key, record);
  started.push(record);
  record.done = env
    .runChild(machine, name, input, executionArn)
    .then(
      (result) =>
        Object.assign(record, {
          status: result.status,
          output: result.output,
          error: result.error,
          cause: result.cause,
        }),
      (err) =>
        Object.assign(record, {
          status: 'FAILED',
          error: 'States.Runtime',
          cause: String(err?.message ?? err),
        }),
    )
    .then(() => {
      record.stoppedAt = Date.now();
      return record;
    });
  return record;
}

/** The IAM authorizations of a call Step Functions makes with the state machine's role, as the
 * twin's recorder writes them (twin/iam/recorder.py; checked by twin/iam/check.py). */
export function authorization(action, resourceType, resource) {
  const [service, name] = action.split(':');
  return {
    service,
    action: name,
    params: { resource },
    contexts: [{ action, resource, resourceType, accountId: resource.split(':')[4], context: {} }],
  };
}

/** What Step Functions calls with the parent's role to run a .sync Task (AWS's "IAM policies for
 * Step Functions" page): StartExecution of the child, DescribeExecution of it, and the managed
 * EventBridge rule it learns the child's end from (PutTargets, PutRule, DescribeRule). */
function syncAuthorizations(record) {
  const [, , , region, account] = record.stateMachineArn.split(':');
  const rule = `arn:aws:events:${region}:${account}:rule/StepFunctionsGetEventsForStepFunctionsExecutionRule`;
  return [
    authorization('states:StartExecution', 'statemachine', record.stateMachineArn),
    authorization('states:DescribeExecution', 'execution', record.executionArn),
    ...['events:PutTargets', 'events:PutRule', 'events:DescribeRule'].map((action) =>
      authorization(action, 'rule-on-default-event-bus', rule),
    ),
  ];
}

/** The local handler of one startExecution Task. `env`: machines ({arn: {name, definition}}),
 * runChild(machine, name, input, arn) -> Promise<{status, output, error, cause}>,
 * authorized(calls) (optional): records the calls Step Functions makes with the role, and
 * taskEvent(type, fields) (optional): logs one of the Task's events in the parent's history. */
export function startExecutionHandler(resource, env) {
  const pattern = RESOURCE.exec(resource);
  const sync = Boolean(pattern[1]);
  const version = pattern[2] ?? '';
  // what the parent's history shows of the Task (AWS: TaskScheduled, TaskStarted, TaskSubmitted
  // with the StartExecution response, then TaskSucceeded or TaskFailed); optional
  const taskEvent = env.taskEvent ?? (async () => {});
  return async (params) => {
    await taskEvent('TaskScheduled', { parameters: params ?? {} });
    await taskEvent('TaskStarted', {});
    let record;
    try {
      record = startChild(params ?? {}, env);
    } catch (err) {
      await taskEvent('TaskFailed', { error: err.name, cause: err.message });
      throw err;
    }
    env.authorized?.(
      sync
        ? syncAuthorizations(record)
        : [authorization('states:StartExecution', 'statemachine', record.stateMachineArn)],
    );
    const submitted = { ExecutionArn: record.executionArn, StartDate: record.startedAt };
    if (!sync) {
      await taskEvent('TaskSucceeded', { output: submitted });
      return submitted;
    }
    await taskEvent('TaskSubmitted', { output: submitted });
    await record.done;
    const description = describe(record, version);
    if (record.status !== 'SUCCEEDED') {
      const failure = new StatesError('States.TaskFailed', JSON.stringify(description));
      await taskEvent('TaskFailed', { error: failure.name, cause: failure.message });
      throw failure;
    }
    await taskEvent('TaskSucceeded', { output: description });
    return description;
  };
}

/** What run.mjs reports of the children (without their promises). */
export function startedExecutions() {
  return started.map(({ done: _done, ...rest }) => rest);
}

export async function allChildrenDone() {
  await Promise.allSettled(started.map((r) => r.done));
}
