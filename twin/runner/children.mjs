// What run.mjs gives the Distributed Map and StartExecution handlers: a Map child run in this
// process (a new execution of the ItemProcessor with the same local handlers), a started state
// machine run as its own runner process (run.mjs on a child job: same functions, emulator and
// settings, its own context, no faults), and ResultWriter's S3 PutObject (boto3 against the
// emulator, with the job's `emulatorEnv`; or files under `resultWriterDir` when a job has no
// emulator, as in the runner's unit tests).
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { StatesError } from './payload.mjs';

const RUN_MJS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'run.mjs');

/** Run a Map child (the ItemProcessor) in-process; resolves to {status, output, error, cause, events}. */
export async function runIteration(StateMachine, definition, input, context, overrides) {
  const machine = new StateMachine(definition, { validationOptions: { noValidate: true } });
  const execution = machine.run(input, { overrides, context });
  const events = [];
  const collecting = (async () => {
    for await (const e of execution.eventLogs) {
      events.push({
        type: e.type,
        timestamp: e.timestamp,
        state: e.state?.name ?? null,
        error: e.Error ?? null,
      });
    }
  })();
  const out = { status: 'SUCCEEDED', output: null, error: null, cause: null, events };
  try {
    out.output = await execution.result;
  } catch (err) {
    const inner = err?.cause instanceof Error ? err.cause : err;
    out.status = 'FAILED';
    out.error = inner?.name ?? 'Error';
    out.cause = inner?.message ?? String(err);
  }
  await collecting;
  return out;
}

/** Run another state machine of the deployment as its own runner process; resolves to its result. */
export function runMachine(job, machine, name, input, executionArn) {
  const jobPath = path.join(job.logDir, `${name}.job.json`);
  const resultPath = path.join(job.logDir, `${name}.result.json`);
  const childJob = {
    ...job,
    definition: machine.definition,
    input,
    context: {
      Execution: {
        Id: executionArn,
        Name: name,
        RoleArn: job.context?.Execution?.RoleArn,
        StartTime: new Date().toISOString(),
      },
      StateMachine: { Id: machine.arn, Name: machine.name },
    },
    faults: [],
    fault: null,
    throttledCallsPerFunction: 0,
    // the parent's live event log and stop file are the parent's own
    liveEventLog: undefined,
    stopFile: undefined,
  };
  writeFileSync(jobPath, JSON.stringify(childJob));
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [RUN_MJS, jobPath, resultPath], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-4000);
    });
    proc.on('exit', (code) => {
      try {
        if (code !== 0) throw new Error(`the child runner for ${name} exited ${code}: ${stderr}`);
        resolve(JSON.parse(readFileSync(resultPath, 'utf8')));
      } catch (err) {
        reject(err);
      }
    });
  });
}

const PUT = `
import json, sys, boto3
req = json.load(sys.stdin)
boto3.client("s3").put_object(Bucket=req["bucket"], Key=req["key"], Body=req["body"].encode(), ContentType="application/json")
`;

/** Tell the emulator about a Map Run (ListMapRuns, DescribeMapRun: twin/emulator/map_runs.py);
 * no emulator (unit tests): nothing to tell. */
export async function announceMapRun(job, run) {
  if (!job.emulatorEndpoint) return;
  const items = run.items.map(({ index, status, startedAt, stoppedAt }) => ({
    index,
    status,
    startedAt,
    stoppedAt,
  }));
  await fetch(`${job.emulatorEndpoint}/_twin/map-run`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ ...run, items }),
  });
}

/** ResultWriter's PutObject. */
export async function putObject(job, bucket, key, body) {
  if (!bucket) throw new StatesError('States.ResultWriterFailed', 'ResultWriter has no Bucket');
  if (!job.emulatorEnv) {
    if (!job.resultWriterDir)
      throw new StatesError('States.ResultWriterFailed', 'the job has no emulator to write results to');
    const file = path.join(job.resultWriterDir, bucket, key);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, body);
    return;
  }
  await new Promise((resolve, reject) => {
    const proc = spawn(job.python, ['-c', PUT], {
      env: { PATH: process.env.PATH, LANG: 'C.UTF-8', ...job.emulatorEnv },
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-2000);
    });
    proc.on('exit', (code) =>
      code === 0
        ? resolve()
        : reject(
            new StatesError('States.ResultWriterFailed', `PutObject s3://${bucket}/${key} failed: ${stderr}`),
          ),
    );
    proc.stdin.end(JSON.stringify({ bucket, key, body }));
  });
}
