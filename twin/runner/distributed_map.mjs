// Distributed Map (ItemProcessor.ProcessorConfig.Mode DISTRIBUTED) for the twin's runner.
//
// aws-local-stepfunctions 3.0.0 runs every Map inline: no child executions, no ResultWriter, no
// tolerated failures. run.mjs therefore turns each DISTRIBUTED Map into a Task state (keeping
// InputPath, ResultSelector, ResultPath, OutputPath, Retry, Catch, Next/End, which the library
// applies as it does for any Task) whose local handler, made here, does what Step Functions does
// for a Map Run:
// - items: ItemsPath of the state's effective input (ItemReader/ItemBatcher are refused);
//   ItemSelector (or the older Parameters) evaluated per item with $$.Map.Item.{Index,Value};
// - each item is a child execution of the ItemProcessor (its own execution: ARN
//   ...:execution:<machine>/<label>:<uuid>, its own context object, its own events);
// - MaxConcurrency / MaxConcurrencyPath: at most N children run at once (0 = no limit);
// - ToleratedFailurePercentage(Path) / ToleratedFailureCount(Path): after each failed child,
//   failed / total items > percentage (or failed > count) fails the Map Run with
//   States.ExceedToleratedFailureThreshold; no further child starts (the items not started are
//   PENDING), children already running run to their end (AWS may also let them run on before the
//   Map Run fails; it may abort them instead - the twin does not abort them). Without a threshold a
//   single failure fails the Map Run (threshold 0);
// - ResultWriter (Resource arn:aws:states:::s3:putObject, Parameters Bucket/Prefix): writes
//   <Prefix>/<map run id>/manifest.json and SUCCEEDED_0.json / FAILED_0.json / PENDING_0.json (only
//   the statuses that have entries) in AWS's shapes, also when the Map Run fails, and the state's
//   result is {MapRunArn, ResultWriterDetails: {Bucket, Key}}; without ResultWriter the result is
//   the array of the children's outputs, in item order.
import { randomUUID } from 'node:crypto';

import { StatesError, atPath, payload } from './payload.mjs';

export const DISTRIBUTED_MAP_RESOURCE = 'arn:aws:states:::twin:distributedMap';
// aws-local-stepfunctions fails a Task after 60 s unless it says otherwise (the ASL spec's
// default); in AWS a Map state has no timeout and a Task without TimeoutSeconds waits on (the
// docs' "stuck execution" warning). The placeholder and StartExecution tasks without a timeout of
// their own get the longest a Node timer allows (~24.8 days) instead.
export const NO_TIMEOUT_SECONDS = 2147483;
const START_EXECUTION = /^arn:aws:states:::states:startExecution/;
const KEPT = [
  'Comment',
  'InputPath',
  'ResultSelector',
  'ResultPath',
  'OutputPath',
  'Retry',
  'Catch',
  'Next',
  'End',
];
const UNSUPPORTED = ['ItemReader', 'ItemBatcher'];

export function isDistributedMap(state) {
  return state?.Type === 'Map' && state.ItemProcessor?.ProcessorConfig?.Mode === 'DISTRIBUTED';
}

/** A copy of a definition in which every DISTRIBUTED Map (at any depth) is a Task placeholder
 * and every StartExecution Task without a timeout has AWS's (none). */
export function withDistributedMapsAsTasks(definition) {
  const states = {};
  for (const [name, state] of Object.entries(definition.States ?? {})) {
    if (isDistributedMap(state)) {
      const task = { Type: 'Task', Resource: DISTRIBUTED_MAP_RESOURCE, TimeoutSeconds: NO_TIMEOUT_SECONDS };
      for (const key of KEPT) if (key in state) task[key] = state[key];
      states[name] = task;
    } else if (state.Type === 'Parallel') {
      states[name] = { ...state, Branches: state.Branches.map(withDistributedMapsAsTasks) };
    } else if (state.Type === 'Map') {
      const inner = state.ItemProcessor ?? state.Iterator;
      const key = state.ItemProcessor ? 'ItemProcessor' : 'Iterator';
      states[name] = { ...state, [key]: withDistributedMapsAsTasks(inner) };
    } else if (state.Type === 'Task' && START_EXECUTION.test(state.Resource) && !hasTimeout(state)) {
      states[name] = { ...state, TimeoutSeconds: NO_TIMEOUT_SECONDS };
    } else {
      states[name] = state;
    }
  }
  return { ...definition, States: states };
}

function hasTimeout(state) {
  return state.TimeoutSeconds !== undefined || state.TimeoutSecondsPath !== undefined;
}

/** The ItemProcessor of a DISTRIBUTED Map as a definition its children run (placeholders too). */
export function processorDefinition(state) {
  const { ProcessorConfig: _config, ...definition } = state.ItemProcessor;
  return withDistributedMapsAsTasks(definition);
}

function integerAt(state, field, input, context, { min, max }) {
  let value = state[field];
  if (state[`${field}Path`] !== undefined) value = atPath(state[`${field}Path`], input, context);
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || Number.isNaN(value) || value < min || value > max) {
    throw new StatesError(
      'States.Runtime',
      `${field}${state[`${field}Path`] ? 'Path' : ''} of the Map state must be a number in ${min}..${max}, got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

/** The Map Run's settings read from the state and its effective input. */
function settings(name, state, input, context) {
  for (const field of UNSUPPORTED) {
    if (state[field])
      throw new StatesError('States.Runtime', `Map ${name}: the twin does not emulate ${field}`);
  }
  const items = state.ItemsPath ? atPath(state.ItemsPath, input, context) : input;
  if (!Array.isArray(items)) {
    throw new StatesError(
      'States.Runtime',
      `Map ${name}: ItemsPath ${state.ItemsPath ?? '$'} is not an array`,
    );
  }
  const max = Number.MAX_SAFE_INTEGER;
  return {
    items,
    maxConcurrency: integerAt(state, 'MaxConcurrency', input, context, { min: 0, max }) ?? 0,
    percentage: integerAt(state, 'ToleratedFailurePercentage', input, context, { min: 0, max: 100 }),
    count: integerAt(state, 'ToleratedFailureCount', input, context, { min: 0, max }),
  };
}

function exceeded(failed, total, { percentage, count }) {
  if (percentage === null && count === null) return failed > 0;
  if (percentage !== null && (failed * 100) / total > percentage) return true;
  return count !== null && failed > count;
}

function label(name, state) {
  return state.Label ?? name.replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 40);
}

/**
 * The local handler of one DISTRIBUTED Map. `env`:
 *   context: the parent execution's context object ({Execution: {Id, Name}, StateMachine: {Id, Name}}),
 *   runChild(definition, input, childContext) -> Promise<{status, output, error, cause, events}>,
 *   putObject(bucket, key, body) -> Promise<void> (ResultWriter),
 *   record(mapRun): called once the Map Run ends, with its record (items, times, concurrency),
 *   announce(mapRun) -> Promise: tells the emulator (ListMapRuns/DescribeMapRun) as it starts and ends.
 */
export function distributedMapHandler(name, state, env) {
  const definition = processorDefinition(state);
  return async (input) => {
    const s = settings(name, state, input, env.context);
    const machine = env.context.StateMachine;
    const runId = randomUUID();
    const childMachineArn = `${machine.Id}/${label(name, state)}`;
    const mapRunArn = `${childMachineArn.replace(':stateMachine:', ':mapRun:')}:${runId}`;
    const run = {
      state: name,
      mapRunArn,
      executionArn: env.context.Execution.Id,
      stateMachineArn: machine.Id,
      maxConcurrency: s.maxConcurrency,
      toleratedFailurePercentage: s.percentage,
      toleratedFailureCount: s.count,
      startedAt: Date.now(),
      stoppedAt: null,
      status: 'RUNNING',
      error: null,
      cause: null,
      maxRunning: 0,
      items: s.items.map((item, index) => ({ index, status: 'PENDING', item })),
      resultWriterDetails: null,
    };
    await env.announce(run);
    await runItems(run, s, state, input, definition, childMachineArn, env);
    run.stoppedAt = Date.now();
    const failed = run.items.filter((i) => i.status === 'FAILED').length;
    if (exceeded(failed, s.items.length, s)) {
      run.status = 'FAILED';
      run.error = 'States.ExceedToleratedFailureThreshold';
      run.cause = `The Map Run ${mapRunArn} failed: ${failed} of ${s.items.length} items failed, more than the tolerated failure threshold (percentage ${s.percentage ?? 0}${s.count === null ? '' : `, count ${s.count}`})`;
    } else {
      run.status = 'SUCCEEDED';
    }
    let result = run.items.map((i) => i.output ?? null);
    if (state.ResultWriter) {
      run.resultWriterDetails = await writeResults(run, runId, state.ResultWriter, input, env);
      result = { MapRunArn: mapRunArn, ResultWriterDetails: run.resultWriterDetails };
    }
    env.record(run);
    await env.announce(run);
    if (run.status === 'FAILED') throw new StatesError(run.error, run.cause);
    return result;
  };
}

/** Runs the items as children, at most maxConcurrency at once, stopping new starts once the
 * tolerated failure threshold is exceeded. */
async function runItems(run, s, state, input, definition, childMachineArn, env) {
  const limit = s.maxConcurrency > 0 ? s.maxConcurrency : s.items.length;
  let next = 0;
  let running = 0;
  let failed = 0;
  const lane = async () => {
    while (next < run.items.length && !exceeded(failed, s.items.length, s)) {
      const record = run.items[next++];
      running += 1;
      run.maxRunning = Math.max(run.maxRunning, running);
      try {
        await runOne(record, s, state, input, definition, childMachineArn, env);
      } finally {
        running -= 1;
      }
      if (record.status !== 'SUCCEEDED') failed += 1;
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, run.items.length) }, lane));
}

async function runOne(record, s, state, input, definition, childMachineArn, env) {
  const selector = state.ItemSelector ?? state.Parameters;
  const mapContext = { ...env.context, Map: { Item: { Index: record.index, Value: record.item } } };
  const name = randomUUID();
  record.name = name;
  record.executionArn = `${childMachineArn.replace(':stateMachine:', ':execution:')}:${name}`;
  record.startedAt = Date.now();
  record.status = 'RUNNING';
  try {
    record.input = selector ? payload(selector, input, mapContext) : record.item;
    const childContext = {
      ...env.context,
      Execution: {
        ...env.context.Execution,
        Id: record.executionArn,
        Name: name,
        StartTime: new Date().toISOString(),
      },
      StateMachine: { Id: childMachineArn, Name: childMachineArn.split(':').pop() },
    };
    const result = await env.runChild(definition, record.input, childContext);
    Object.assign(record, {
      status: result.status,
      output: result.output,
      error: result.error,
      cause: result.cause,
      states: (result.events ?? []).filter((e) => e.type === 'StateEntered').map((e) => e.state),
    });
  } catch (err) {
    Object.assign(record, {
      status: 'FAILED',
      output: null,
      error: err.name ?? 'Error',
      cause: err.message ?? String(err),
    });
  }
  record.stoppedAt = Date.now();
}

/** One entry of SUCCEEDED_n / FAILED_n / PENDING_n.json: DescribeExecution's fields, Input and
 * Output as JSON strings, dates as ISO strings. */
function resultEntry(run, record, childMachineArn) {
  if (record.status === 'PENDING') {
    return { Input: JSON.stringify(record.input ?? record.item), InputDetails: { Included: true } };
  }
  const entry = {
    ExecutionArn: record.executionArn,
    Input: JSON.stringify(record.input ?? null),
    InputDetails: { Included: true },
    Name: record.name,
    RedriveCount: 0,
    RedriveStatus: record.status === 'SUCCEEDED' ? 'NOT_REDRIVABLE' : 'REDRIVABLE',
    RedriveStatusReason:
      record.status === 'SUCCEEDED'
        ? 'Execution is SUCCEEDED and cannot be redriven'
        : 'Execution can be redriven',
    StartDate: new Date(record.startedAt).toISOString(),
    StateMachineArn: childMachineArn,
    Status: record.status,
    StopDate: new Date(record.stoppedAt).toISOString(),
  };
  if (record.status === 'SUCCEEDED') {
    entry.Output = JSON.stringify(record.output);
    entry.OutputDetails = { Included: true };
  } else {
    entry.Error = record.error;
    entry.Cause = record.cause;
  }
  return entry;
}

async function writeResults(run, runId, writer, input, env) {
  if (writer.Resource !== 'arn:aws:states:::s3:putObject') {
    throw new StatesError(
      'States.ResultWriterFailed',
      `the twin's ResultWriter writes with s3:putObject, not ${writer.Resource}`,
    );
  }
  const params = payload(writer.Parameters ?? {}, input, env.context);
  const prefix = params.Prefix ? `${String(params.Prefix).replace(/\/+$/, '')}/` : '';
  const childMachineArn = run.mapRunArn.replace(':mapRun:', ':stateMachine:').replace(/:[^:]+$/, '');
  const files = { FAILED: [], PENDING: [], SUCCEEDED: [] };
  for (const status of Object.keys(files)) {
    // TIMED_OUT and ABORTED children are counted as failed and listed in FAILED, as AWS does.
    const entries = run.items
      .filter((r) =>
        status === 'FAILED' ? !['SUCCEEDED', 'PENDING'].includes(r.status) : r.status === status,
      )
      .map((r) => resultEntry(run, r, childMachineArn));
    if (entries.length === 0) continue;
    const key = `${prefix}${runId}/${status}_0.json`;
    const body = JSON.stringify(entries);
    await env.putObject(params.Bucket, key, body);
    files[status].push({ Key: key, Size: Buffer.byteLength(body) });
  }
  const manifestKey = `${prefix}${runId}/manifest.json`;
  const manifest = { DestinationBucket: params.Bucket, MapRunArn: run.mapRunArn, ResultFiles: files };
  await env.putObject(params.Bucket, manifestKey, JSON.stringify(manifest));
  return { Bucket: params.Bucket, Key: manifestKey };
}
