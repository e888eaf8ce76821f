// Runs a state machine definition with aws-local-stepfunctions; every Lambda task runs the real
// Python handler in a local worker process (lambda_worker.py) pointed at the twin's emulator,
// forked from the twin's warm zygote (lambda_zygote.py) by lambda_spawn.py.
//
// usage: node twin/runner/run.mjs JOB.json RESULT.json
// JOB: {definition, input, context, functions: {<arn>: {name, handler, env, codeDir}},
//       python, worker (lambda_spawn.py), zygote (its socket), logDir, waitMs, msPerAwsSecond,
//       msPerAwsSecondOfWork, retryMs, throttledCallsPerFunction,
//       faults: [{kind: error|throttle|abort|lost, state: <Task state>}, ...], emulatorEndpoint,
//       liveEventLog (optional: a JSON-lines file each event is appended to as it happens),
//       stopFile (optional: the run aborts when this file appears: the twin's StopExecution),
//       stateMachines (optional: {<arn>: {arn, name, definition, inProcess}} that StartExecution
//       tasks start; inProcess: a top-level Task's child runs in this process, see runStates()),
//       iamCalls (optional: the file the calls Step Functions makes with the role are appended to),
//       emulatorEnv (optional: boto3 environment for ResultWriter's PutObject) or resultWriterDir,
//       validatedDir (optional: markers of the definitions validated already, validatedMachine())}
//       (a single `fault: {kind, state}` is still read as a list of one)
// RESULT: {status (SUCCEEDED|FAILED|TIMED_OUT|ABORTED), output, error, cause, events, invocations,
//          workflowReport, faults: [{kind, state, applied: bool, detail}, ...],
//          fault: the only one of faults, or null (callers of the single-fault shape),
//          mapRuns: [Distributed Map runs], childExecutions: [executions StartExecution started]}
//
// Faults (KIND@STATE): error = the task's Lambda raises TwinInjectedError on its first call in
// STATE; throttle = every invocation tells its worker the state it runs for, the worker marks
// each AWS request with it and the emulator throttles the first requests of that state; abort =
// StopExecution as STATE is entered, while its Lambda call is in flight: that call completes (as a
// real Lambda does after an abort) and the runner waits for it before reporting ABORTED; lost =
// as STATE is entered, the emulator terminates this execution's transfer instance (Spot).
// Each fault of the list fires once, at the first call in its own state, in whatever order the
// run reaches them (an opener fault, e.g. lost@Check compaction, leads it to a recovery path).

// aws-local-stepfunctions 3.0.0 calls Promise.withResolvers (Node >= 22); Node 20 lacks it.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers() {
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}

import { spawn } from 'node:child_process';
import {
  appendFileSync,
  createWriteStream,
  existsSync,
  readFileSync,
  writeFileSync,
  mkdirSync,
} from 'node:fs';
import { createHash, randomUUID } from 'node:crypto';
import path from 'node:path';
import readline from 'node:readline';

const { StateMachine, ExecutionError, ExecutionAbortedError, ExecutionTimeoutError } = await import(
  'aws-local-stepfunctions'
);
// Distributed Map and StartExecution (issue #10's batches): twin/runner/distributed_map.mjs,
// start_execution.mjs, children.mjs; hooks below are marked "batches".
const { distributedMapHandler, isDistributedMap, withDistributedMapsAsTasks } = await import(
  './distributed_map.mjs'
);
const { allChildrenDone, authorization, isStartExecution, startExecutionHandler, startedExecutions } =
  await import('./start_execution.mjs');
const { announceMapRun, putObject, runIteration, runMachine } = await import('./children.mjs');

const [jobPath, resultPath] = process.argv.slice(2);
if (!jobPath || !resultPath) {
  console.error('usage: node twin/runner/run.mjs JOB.json RESULT.json');
  process.exit(2);
}
const job = JSON.parse(readFileSync(jobPath, 'utf8'));
mkdirSync(job.logDir, { recursive: true });

/** A Python process that imports one function's handler once (a warm Lambda container). */
class Worker {
  constructor(arn, fn) {
    this.fn = fn;
    this.pending = new Map();
    this.nextId = 1;
    const env = {
      PATH: process.env.PATH,
      LANG: 'C.UTF-8',
      PYTHONPATH: fn.codeDir,
      PYTHONUNBUFFERED: '1',
      AWS_LAMBDA_FUNCTION_NAME: fn.name,
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(fn.memory ?? 128),
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${fn.name}`,
      AWS_EXECUTION_ENV: 'AWS_Lambda_python3.13',
      LAMBDA_TASK_ROOT: fn.codeDir,
      ...fn.env,
    };
    const log = createWriteStream(path.join(job.logDir, `${fn.name}.log`), { flags: 'a' });
    this.proc = spawn(job.python, ['-S', job.worker, job.zygote, fn.handler, arn], {
      env,
      cwd: fn.codeDir,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.proc.stderr.pipe(log);
    this.exited = null;
    this.proc.on('exit', (code, signal) => {
      this.exited = `worker for ${fn.name} exited (code ${code}, signal ${signal})`;
      for (const { reject } of this.pending.values()) reject(new Error(this.exited));
      this.pending.clear();
    });
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        return;
      }
      const waiter = this.pending.get(msg.id);
      if (!waiter) return;
      this.pending.delete(msg.id);
      waiter.resolve(msg);
    });
  }

  invoke(event, state) {
    if (this.exited) return Promise.reject(new Error(this.exited));
    const id = this.nextId++;
    const requestId = randomUUID();
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.proc.stdin.write(`${JSON.stringify({ id, requestId, event, state })}\n`);
    }).then((msg) => ({ ...msg, requestId }));
  }

  stop() {
    if (!this.exited) this.proc.stdin.end();
  }
}

/** The state machine of `definition`, validated by asl-validator (as the library does) unless a
 * runner of this twin process validated the same definition with the same options already.
 * Validating compiles the validator's JSON schema, about 0.9 CPU-seconds: half of a runner's CPU,
 * and a twin process runs the same few definitions again and again. Each one that passes leaves
 * a marker named by its hash in job.validatedDir (twin/execution.py); one that fails leaves none,
 * so each of its runs fails alike. Without validatedDir (the runner's unit tests) always. */
function validatedMachine(definition, validationOptions) {
  const key = createHash('sha256').update(JSON.stringify({ definition, validationOptions })).digest('hex');
  const marker = job.validatedDir ? path.join(job.validatedDir, key) : null;
  const known = marker !== null && existsSync(marker);
  const machine = new StateMachine(definition, {
    validationOptions: known ? { noValidate: true } : validationOptions,
  });
  if (marker !== null && !known) writeFileSync(marker, '');
  return machine;
}

const workers = new Map();
const calls = new Map();
const invocations = [];
let workflowReport = null;

function workerFor(arn) {
  const fn = job.functions[arn];
  if (!fn) throw new Error(`the definition calls ${arn}, which is not a function of the template`);
  if (!workers.has(arn)) workers.set(arn, new Worker(arn, fn));
  return workers.get(arn);
}

/** The error a Task sees when the function fails: name = the Python exception class,
 * message = the Cause Step Functions shows ({errorMessage, errorType, requestId, stackTrace}). */
class LambdaFunctionError extends Error {
  constructor(msg) {
    super(
      JSON.stringify({
        errorMessage: msg.errorMessage,
        errorType: msg.errorType,
        requestId: msg.requestId,
        stackTrace: msg.stackTrace ?? [],
      }),
    );
    this.name = msg.errorType;
  }
}

/** The error fault error@STATE makes the task's Lambda raise (a handler error, like any other). */
class TwinInjectedError extends Error {
  constructor(stateName, requestId) {
    const message = `twin fault error@${stateName}: the Lambda raised on its first call in this state`;
    super(
      JSON.stringify({
        errorMessage: message,
        errorType: 'TwinInjectedError',
        requestId,
        stackTrace: [],
      }),
    );
    this.name = 'TwinInjectedError';
  }
}

const faultList = job.faults ?? (job.fault ? [job.fault] : []);
const faultReports = faultList.map((f) => ({ ...f, applied: false, detail: null }));
const inflight = new Set();
let execution = null;

/** The fault KIND@stateName if this call is the first one in its state (each fault fires once):
 * its report, to mark applied; else null. */
function faultHere(kind, stateName) {
  return faultReports.find((f) => f.kind === kind && f.state === stateName && !f.applied) ?? null;
}

// EC2's eventual consistency (the emulator's tag-filter lag, deregistration settling) is counted
// in calls; a Wait that would last SETTLE_SECONDS or more in AWS lets it settle before the next
// task (the twin shortens the Wait itself to waitMs). Waits with SecondsPath/TimestampPath count
// as long (poll intervals from the plan).
const SETTLE_SECONDS = 30;
let settlePending = false;

function waitSettles(state) {
  if (state.Type !== 'Wait') return false;
  if (typeof state.Seconds === 'number') return state.Seconds >= SETTLE_SECONDS;
  return true;
}

async function settleIfDue() {
  if (!settlePending || !job.emulatorEndpoint) return;
  settlePending = false;
  await fetch(`${job.emulatorEndpoint}/_twin/settle`, { method: 'POST', body: '{}' });
}

async function loseInstance() {
  const answer = await fetch(`${job.emulatorEndpoint}/_twin/lost`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ execution: job.context.Execution.Name }),
  });
  return (await answer.json()).interrupted ?? [];
}

class LambdaServiceError extends Error {
  constructor(name, message) {
    super(message);
    this.name = name;
  }
}

function taskHandler(stateName, arn, unwrapPayload) {
  return async (input) => {
    const fnArn = unwrapPayload ? input.FunctionName : arn;
    const event = unwrapPayload ? input.Payload : input;
    const fn = job.functions[fnArn];
    const n = (calls.get(fnArn) ?? 0) + 1;
    calls.set(fnArn, n);
    const started = Date.now();
    const record = { state: stateName, function: fn?.name ?? fnArn, started, ms: 0, error: null };
    invocations.push(record);
    await settleIfDue();
    const throttled = faultHere('throttle', stateName);
    if (throttled) {
      // The emulator throttles this state's requests (X-Twin-State); the run reached the state.
      throttled.applied = true;
      throttled.detail = "the emulator throttles this state's AWS requests";
    }
    const errored = faultHere('error', stateName);
    if (errored) {
      errored.applied = true;
      errored.detail = 'the Lambda raised TwinInjectedError';
      record.error = 'TwinInjectedError';
      throw new TwinInjectedError(stateName, randomUUID());
    }
    const lostHere = faultHere('lost', stateName);
    if (lostHere) {
      lostHere.applied = true;
      const lost = await loseInstance();
      lostHere.detail = lost.length
        ? `terminated ${lost.join(', ')} (Spot interruption)`
        : 'no running transfer instance of this execution';
    }
    if (n <= (job.throttledCallsPerFunction ?? 0)) {
      record.error = 'Lambda.TooManyRequestsException';
      throw new LambdaServiceError(
        'Lambda.TooManyRequestsException',
        'Rate Exceeded. (Service: Lambda, Status Code: 429, Request ID: ' + randomUUID() + ')',
      );
    }
    const call = workerFor(fnArn).invoke(event, stateName);
    inflight.add(call);
    call.catch(() => {}).finally(() => inflight.delete(call));
    const aborted = faultHere('abort', stateName);
    if (aborted) {
      aborted.applied = true;
      aborted.detail = 'StopExecution while the Lambda call was in flight; the call completed';
      setImmediate(abortRun);
    }
    const msg = await call;
    record.ms = Date.now() - started;
    if (!msg.ok) {
      record.error = msg.errorType;
      throw new LambdaFunctionError(msg);
    }
    rememberResult(stateName, msg.result);
    // The report task's result is the workflow's own account of the run, also on failure paths.
    if (fn.handler.endsWith('.report.handler')) workflowReport = msg.result;
    if (!unwrapPayload) return msg.result;
    return {
      ExecutedVersion: '$LATEST',
      Payload: msg.result,
      StatusCode: 200,
      SdkHttpMetadata: { HttpStatusCode: 200 },
      SdkResponseMetadata: { RequestId: msg.requestId },
    };
  };
}

// Time in the twin: a Wait of N seconds in AWS lasts N x msPerAwsSecond ms here (at least waitMs),
// so poll loops keep their proportions: a bound the plan sized for AWS seconds still covers a copy
// that takes real seconds on this machine. A Wait whose seconds come from the state (SecondsPath)
// reads them from the task results the run has seen so far, kept by their ResultPath; that one
// (the compaction poll) bounds real work on this machine and lasts msPerAwsSecondOfWork ms a
// second (twin/execution.py MS_PER_AWS_SECOND_OF_WORK).
const taskResults = {};

function rememberResult(stateName, result) {
  const path = settling[stateName]?.ResultPath;
  if (typeof path !== 'string' || !path.startsWith('$.')) return;
  const keys = path.slice(2).split('.');
  let node = taskResults;
  for (const key of keys.slice(0, -1)) node = node[key] ??= {};
  node[keys[keys.length - 1]] = result;
}

function secondsAt(path) {
  if (typeof path !== 'string' || !path.startsWith('$.')) return undefined;
  let node = taskResults;
  for (const key of path.slice(2).split('.')) node = node?.[key];
  return typeof node === 'number' ? node : undefined;
}

function waitMs(state) {
  const fixed = typeof state.Seconds === 'number';
  const seconds = fixed ? state.Seconds : secondsAt(state.SecondsPath);
  if (seconds === undefined) return job.waitMs;
  const scale = fixed ? job.msPerAwsSecond : (job.msPerAwsSecondOfWork ?? job.msPerAwsSecond);
  return Math.max(job.waitMs, Math.round(seconds * (scale ?? 0)));
}

/** Every state of a definition, including those inside Map and Parallel states. */
function* allStates(definition) {
  for (const [name, state] of Object.entries(definition.States ?? {})) {
    yield [name, state];
    for (const branch of state.Branches ?? []) yield* allStates(branch);
    const inner = state.ItemProcessor ?? state.Iterator;
    if (inner) yield* allStates(inner);
  }
}

// An execution of this runner may start children of its own (a compaction its launch attempts:
// a StartExecution Task at the top level of its definition, of a state machine the job marks
// `inProcess`). Those run in this process, as Step Functions would run them beside it: the same
// workers, faults, emulator and task results, their events in this run's event log (tagged with
// the child's name). Any other child (a batch item, started from a Map iteration) is an execution
// of its own with its own runner process (children.mjs).
const machines = job.stateMachines ?? {};
const topLevel = new Set(Object.keys(job.definition.States ?? {}));
const inProcessChild = (name, state) =>
  topLevel.has(name) &&
  state.Type === 'Task' &&
  isStartExecution(state.Resource) &&
  machines[state.Parameters?.StateMachineArn]?.inProcess === true;
const inProcessMachines = Object.entries(job.definition.States ?? {})
  .filter(([name, state]) => inProcessChild(name, state))
  .map(([, state]) => machines[state.Parameters.StateMachineArn]);

/** The states of this definition and of the children that run in this process, by name (a
 * child's names must not be the parent's: the local handlers and wait overrides are by name). */
function runStates() {
  const out = Object.fromEntries(allStates(job.definition));
  for (const child of inProcessMachines) {
    for (const [name, state] of allStates(child.definition)) {
      if (name in out && out[name] !== state) {
        throw new Error(`state "${name}" is in ${child.name} and in its parent: names must be unique`);
      }
      out[name] = state;
    }
  }
  return out;
}

const settling = runStates();
const taskResourceLocalHandlers = {};
const waitTimeOverrides = {};
const retryIntervalOverrides = {};
// batches: what the Distributed Map and StartExecution handlers are given (see children.mjs)
const mapRuns = [];
const overrides = { taskResourceLocalHandlers, waitTimeOverrides, retryIntervalOverrides };
const childEnv = {
  context: job.context,
  machines: job.stateMachines ?? {},
  runChild: (definition, input, ctx) =>
    runIteration(StateMachine, definition, input, { ...ctx, State: context.State }, overrides),
  putObject: (bucket, key, body) => putObject(job, bucket, key, body),
  record: (run) => mapRuns.push(run),
  announce: (run) => announceMapRun(job, run),
};
/** Calls Step Functions makes with this state machine's role (the twin's IAM check judges them by
 * that role: twin/iam/check.py), appended to the emulator's recording (job.iamCalls). */
function authorized(calls) {
  if (!job.iamCalls) return;
  const caller = `state-machine:${job.context.StateMachine.Name}`;
  const lines = calls.map((call) => `${JSON.stringify({ caller, ...call })}\n`);
  appendFileSync(job.iamCalls, lines.join(''));
}
const machineEnv = {
  machines,
  runChild: (machine, name, input, arn) => runMachine(job, machine, name, input, arn),
  authorized,
};
const inProcessEnv = { machines, runChild: runInProcess, authorized };
// The in-process children's Task states: their Task events come from their handler (taskEventOf)
const ownTaskEvents = new Set();
for (const [name, state] of Object.entries(settling)) {
  if (isDistributedMap(state)) taskResourceLocalHandlers[name] = distributedMapHandler(name, state, childEnv);
  if (state.Type === 'Task') {
    if (isStartExecution(state.Resource)) {
      const inProcess = inProcessChild(name, state);
      if (inProcess) ownTaskEvents.add(name);
      const env = inProcess ? { ...inProcessEnv, taskEvent: taskEventOf(name, state.Resource) } : machineEnv;
      taskResourceLocalHandlers[name] = startExecutionHandler(state.Resource, env);
    } else if (state.Resource in job.functions) {
      taskResourceLocalHandlers[name] = taskHandler(name, state.Resource, false);
    } else if (/^arn:aws:states:::lambda:invoke/.test(state.Resource)) {
      taskResourceLocalHandlers[name] = taskHandler(name, null, true);
    } else {
      throw new Error(
        `Task ${name} uses ${state.Resource}; the twin runs Lambda and StartExecution tasks only`,
      );
    }
  }
  if (state.Type === 'Wait') {
    Object.defineProperty(waitTimeOverrides, name, { get: () => waitMs(state), enumerable: true });
  }
  if (state.Retry) retryIntervalOverrides[name] = job.retryMs;
}

// $$.State.EnteredTime: the library's context object has no State; a getter answers with the
// time it is read, which is inside the state that reads it (Pass states read it on entry).
let currentState = null;
const context = {
  ...job.context,
  State: {
    get EnteredTime() {
      return new Date().toISOString();
    },
    get Name() {
      return currentState;
    },
    RetryCount: 0,
  },
};

/** The outcome of a finished run of the library as the result file says it. */
async function outcomeOf(run) {
  const out = { status: 'RUNNING', output: null, error: null, cause: null };
  try {
    out.output = await run.result;
    out.status = 'SUCCEEDED';
  } catch (err) {
    if (err instanceof ExecutionAbortedError) {
      out.status = 'ABORTED';
    } else if (err instanceof ExecutionTimeoutError) {
      out.status = 'TIMED_OUT';
      out.error = 'States.Timeout';
    } else {
      out.status = 'FAILED';
      const inner = err instanceof ExecutionError ? err.cause : err;
      out.error = inner?.name ?? String(err);
      out.cause = inner?.cause ?? inner?.message ?? null;
    }
  }
  return out;
}

const runningChildren = new Map();
const collectors = [];

/** The live log of an in-process child: its own history, beside this execution's live log (the
 * twin's GetExecutionHistory of the child's ARN answers from it). */
function childLiveLog(name) {
  return job.liveEventLog ? path.join(path.dirname(job.liveEventLog), `${name}.events.jsonl`) : null;
}

/** Tell the emulator an in-process child started or ended, so that it is an execution of its own
 * there (DescribeExecution, GetExecutionHistory from its live log, ListExecutions:
 * twin/emulator/stepfunctions_twin.py); without a live log (no Step Functions API): nothing. */
async function announceChild(child) {
  if (!job.emulatorEndpoint || !child.log) return;
  await fetch(`${job.emulatorEndpoint}/_twin/child-execution`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(child),
  });
}

/** A child of this execution (a launch attempt), run here: see runStates(). */
async function runInProcess(machine, name, input, executionArn) {
  const log = childLiveLog(name);
  const announced = { executionArn, stateMachineArn: machine.arn, name, input, log };
  if (log) writeFileSync(log, '');
  await announceChild({ ...announced, status: 'RUNNING' });
  const child = validatedMachine(withDistributedMapsAsTasks(machine.definition), { checkArn: false });
  const childContext = {
    ...context,
    Execution: {
      ...job.context.Execution,
      Id: executionArn,
      Name: name,
      StartTime: new Date().toISOString(),
    },
    StateMachine: { Id: machine.arn, Name: machine.name },
  };
  const run = child.run(input, { overrides, context: childContext });
  runningChildren.set(run, executionArn);
  const collecting = collect(run, name);
  collectors.push(collecting);
  let outcome = { status: 'FAILED', output: null, error: 'States.Runtime', cause: 'the child did not end' };
  try {
    outcome = await outcomeOf(run);
    return outcome;
  } finally {
    runningChildren.delete(run);
    // its last events first, so that its history ends before DescribeExecution says it ended
    await collecting;
    await announceChild({ ...announced, ...outcome });
  }
}

/** StopExecution: the run and, as Step Functions stops a .sync child with its parent, its children. */
function abortRun() {
  execution.abort();
  for (const [run, executionArn] of runningChildren) {
    authorized([authorization('states:StopExecution', 'execution', executionArn)]);
    run.abort();
  }
}

const machine = validatedMachine(withDistributedMapsAsTasks(job.definition), { checkArn: false });
execution = machine.run(job.input, { overrides, context });

// StopExecution of the twin's Step Functions API (job.stopFile, optional): the file's appearance
// aborts the run (the Lambda call in flight completes, as below).
if (job.stopFile) {
  const watch = setInterval(() => {
    if (!existsSync(job.stopFile)) return;
    clearInterval(watch);
    abortRun();
  }, 100);
  watch.unref();
}

const events = [];
// The live event log (job.liveEventLog, optional): each event as one JSON line as it happens, with
// the state's input and output, so the twin's GetExecutionHistory answers while the run goes on.
function liveLog(event, executionName) {
  if (!job.liveEventLog) return;
  // An in-process child's events are its own history's; the parent's history has only the Task's
  // events (taskEventOf), its TaskFailed among them.
  const file = executionName === null ? job.liveEventLog : childLiveLog(executionName);
  if (executionName === null && event.type === 'StateFailed' && ownTaskEvents.has(event.state?.name)) return;
  const line = {
    execution: executionName,
    type: event.type,
    timestamp: event.timestamp,
    state: event.state?.name ?? null,
    stateType: event.state?.type ?? null,
    input: event.state?.input ?? event.input ?? null,
    output: event.state?.output ?? event.output ?? null,
    error: event.Error ?? null,
    cause: event.Cause ?? null,
  };
  appendFileSync(file, `${JSON.stringify(line)}\n`);
}

/** The Task events (TaskScheduled, TaskStarted, TaskSubmitted, TaskSucceeded, TaskFailed) of the
 * StartExecution Task `stateName`, into this execution's live log as AWS puts them in its history. */
function taskEventOf(stateName, resource) {
  return async (type, fields) => {
    if (!job.liveEventLog) return;
    // the handler runs as the state is entered: the collector logs StateEntered first
    await new Promise((resolve) => setImmediate(resolve));
    const line = {
      execution: null,
      type,
      timestamp: Date.now(),
      state: stateName,
      stateType: 'Task',
      resource,
      input: fields.parameters ?? null,
      output: fields.output ?? null,
      error: fields.error ?? null,
      cause: fields.cause ?? null,
    };
    appendFileSync(job.liveEventLog, `${JSON.stringify(line)}\n`);
  };
}

/** Every event of `run` into the run's event log; `executionName` is null for this execution's
 * own events, a child's name for an in-process child's. */
async function collect(run, executionName) {
  for await (const event of run.eventLogs) {
    if (event.type === 'StateEntered') {
      currentState = event.state.name;
      if (waitSettles(settling[event.state.name] ?? {})) settlePending = true;
    }
    liveLog(event, executionName);
    events.push({
      type: event.type,
      timestamp: event.timestamp,
      execution: executionName,
      state: event.state?.name ?? null,
      stateType: event.state?.type ?? null,
      error: event.Error ?? null,
      cause: event.Cause ?? null,
      retryAttempt: event.retry?.attempt ?? null,
    });
  }
}
collectors.push(collect(execution, null));

const result = await outcomeOf(execution);
// An aborted execution's Lambda calls still run to their end, as in AWS: wait for them.
await Promise.allSettled([...inflight]);
await allChildrenDone(); // batches: a started child (request-response) runs to its end
if (result.status === 'ABORTED') await new Promise((res) => setTimeout(res, 50));
await Promise.all(collectors);
for (const worker of workers.values()) worker.stop();
writeFileSync(
  resultPath,
  JSON.stringify(
    {
      ...result,
      events,
      invocations,
      workflowReport,
      mapRuns, // batches: each Distributed Map run (items, times, maxRunning)
      childExecutions: startedExecutions(), // batches: executions StartExecution started
      faults: faultReports,
      fault: faultReports.length === 1 ? faultReports[0] : null,
    },
    null,
    1,
  ),
);
process.exit(0);
