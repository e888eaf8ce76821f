import { ChildProcess, fork } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/**
 * Templates shared by every test file of a jest run: each context is synthesized once, by the template
 * server (template-server.ts), not once per file or per test. The files talk through one directory:
 * `<key>.request.json` asks, `<key>.template.json` or `<key>.error.txt` answers.
 */
const DIR_VARIABLE = 'COMPACTOR_TEST_TEMPLATES_DIR';
const PID_VARIABLE = 'COMPACTOR_TEST_TEMPLATE_SERVER_PID';
/** Far beyond a synth (seconds); only a server stuck for good gets here. */
const ANSWER_TIMEOUT_MS = 10 * 60 * 1000;

type Context = Record<string, unknown>;

/** The same key for the same context, whatever the order of its keys. */
function templateKey(context: Context): string {
  const sorted = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(sorted)
      : value !== null && typeof value === 'object'
        ? Object.fromEntries(
            Object.keys(value)
              .sort()
              .map((k) => [k, sorted((value as Context)[k])]),
          )
        : value;
  return crypto
    .createHash('sha256')
    .update(JSON.stringify(sorted(context)))
    .digest('hex')
    .slice(0, 32);
}

export function answerFiles(dir: string, key: string): { template: string; error: string } {
  return { template: path.join(dir, `${key}.template.json`), error: path.join(dir, `${key}.error.txt`) };
}

/** Whole or not at all: the reader never sees a file half written. */
export function writeAtomically(file: string, text: string): void {
  const partial = `${file}.${process.pid}.partial`;
  fs.writeFileSync(partial, text);
  fs.renameSync(partial, file);
}

export function pendingRequests(dir: string): { file: string; key: string; context: Context }[] {
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith('.request.json'))
    .map((name) => {
      const file = path.join(dir, name);
      return {
        file,
        key: name.replace(/\.request\.json$/, ''),
        context: JSON.parse(fs.readFileSync(file, 'utf8')),
      };
    });
}

/**
 * A server that died stays a zombie until its parent reaps it, and when jest runs in band its parent is this
 * very process, blocked waiting here: so a zombie counts as dead, which Linux's /proc tells. Without /proc,
 * signal 0 tells only whether the process exists (a zombie's wait ends at the deadline).
 */
function serverAlive(pid: number): boolean {
  if (fs.existsSync('/proc/self/stat')) {
    const stat = `/proc/${pid}/stat`;
    // the state follows the command name in parentheses
    return fs.existsSync(stat) && !/\) [ZX]/.test(fs.readFileSync(stat, 'utf8'));
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * The template JSON of `context` from this run's template server; undefined when there is no server (jest
 * run without test/cdk/global-setup.ts) or its synth failed (the caller synthesizes in-process, so that a
 * test sees the real error).
 */
export function servedTemplateJson(context: Context): object | undefined {
  const dir = process.env[DIR_VARIABLE];
  if (!dir) return undefined;
  const pid = Number(process.env[PID_VARIABLE]);
  const key = templateKey(context);
  const answer = answerFiles(dir, key);
  if (!fs.existsSync(answer.template) && !fs.existsSync(answer.error)) {
    writeAtomically(path.join(dir, `${key}.request.json`), JSON.stringify(context));
  }
  const deadline = Date.now() + ANSWER_TIMEOUT_MS;
  while (!fs.existsSync(answer.template)) {
    if (fs.existsSync(answer.error)) return undefined;
    const why = !serverAlive(pid)
      ? 'it exited (its error is in the output above)'
      : Date.now() > deadline
        ? 'no answer in 10 minutes'
        : '';
    if (why) {
      throw new Error(
        `The template server of this jest run (pid ${pid}, test/cdk/template-server.ts) gave no template for ${JSON.stringify(context)}: ${why}.`,
      );
    }
    sleep(20);
  }
  return JSON.parse(fs.readFileSync(answer.template, 'utf8'));
}

declare global {
  var compactorTemplateServer: { server: ChildProcess; dir: string } | undefined;
}

/** For jest's globalSetup: the workers, started after it, inherit the two variables. */
export function startTemplateServer(): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdk-templates-'));
  const server = fork(path.join(__dirname, 'template-server.ts'), [dir], {
    cwd: path.join(__dirname, '..', '..'),
    execArgv: ['--require', 'ts-node/register/transpile-only'],
    // as cdk.json's app: lib's .ts, never a stale .js beside it
    env: { ...process.env, TS_NODE_PREFER_TS_EXTS: 'true' },
  });
  process.env[DIR_VARIABLE] = dir;
  process.env[PID_VARIABLE] = String(server.pid);
  globalThis.compactorTemplateServer = { server, dir };
}

/** For jest's globalTeardown. */
export function stopTemplateServer(): void {
  const running = globalThis.compactorTemplateServer;
  if (!running) return;
  running.server.kill();
  fs.rmSync(running.dir, { recursive: true, force: true });
  globalThis.compactorTemplateServer = undefined;
}
