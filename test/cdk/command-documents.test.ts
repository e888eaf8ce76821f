import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as YAML from 'yaml';
import { LIMITS } from '../../lib/settings';
import { LAMBDAS_DIR } from '../../lib/task-functions';
import {
  MAX_DOCUMENT_BYTES,
  PROGRAM_PLACEHOLDER,
  programArchive,
  programFile,
  programSha256,
  renderCommandDocument,
  SPARSECOPY_DIR,
  SSM_DOCUMENTS_DIR,
} from '../../lib/command-document';

interface Parameter {
  type: string;
  default?: string;
  allowedPattern?: string;
  allowedValues?: string[];
}

const DOCUMENTS = fs
  .readdirSync(SSM_DOCUMENTS_DIR)
  .filter((name) => name.endsWith('.yaml'))
  .map((name) => [name, path.join(SSM_DOCUMENTS_DIR, name)]);

const PYTHON = path.join(__dirname, '..', '..', '.venv', 'bin', 'python');

function tempDir(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

function scripts(content: { mainSteps: { action: string; inputs: { runCommand?: string[] } }[] }): string[] {
  return content.mainSteps
    .filter((step) => step.action === 'aws:runShellScript')
    .map((step) => (step.inputs.runCommand ?? []).join('\n'));
}

describe.each(DOCUMENTS)('Command document %s', (_name, file) => {
  const text = fs.readFileSync(file, 'utf8');
  const content = YAML.parse(text);
  const parameters: Record<string, Parameter> = content.parameters ?? {};

  test('is schema 2.2 with at least one step', () => {
    expect(content.schemaVersion).toBe('2.2');
    expect(content.mainSteps.length).toBeGreaterThan(0);
  });

  test.each(Object.keys(parameters))(
    'parameter %s is a constrained String whose default is allowed',
    (name) => {
      const parameter = parameters[name];
      expect(parameter.type).toBe('String');
      expect(parameter.allowedPattern !== undefined || parameter.allowedValues !== undefined).toBe(true);
      if (parameter.default !== undefined) {
        if (parameter.allowedPattern) expect(parameter.default).toMatch(new RegExp(parameter.allowedPattern));
        if (parameter.allowedValues) expect(parameter.allowedValues).toContain(parameter.default);
      }
    },
  );

  test('every {{ X }} is a defined parameter and every parameter is used', () => {
    const used = new Set([...text.matchAll(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g)].map((m) => m[1]));
    expect([...used].filter((name) => !(name in parameters))).toEqual([]);
    expect(Object.keys(parameters).filter((name) => !used.has(name))).toEqual([]);
  });

  test('every shell script passes bash -n', () => {
    for (const script of scripts(content)) {
      const result = spawnSync('bash', ['-n'], { input: script, encoding: 'utf8' });
      expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
    }
  });
});

describe('the data-plane program (a file asset the document pins)', () => {
  test("is byte-identical whatever the files' times, the time zone or the run (fixed 1980-01-01 mtime)", () => {
    const archive = programArchive();
    expect(programArchive().equals(archive)).toBe(true);
    const dir = tempDir('program-');
    const zone = process.env.TZ;
    try {
      fs.cpSync(SPARSECOPY_DIR, dir, { recursive: true });
      for (const name of fs.readdirSync(dir)) fs.utimesSync(path.join(dir, name), 1e9, 2e9);
      process.env.TZ = 'Pacific/Kiritimati';
      expect(programArchive(dir).equals(archive)).toBe(true);
    } finally {
      if (zone === undefined) delete process.env.TZ;
      else process.env.TZ = zone;
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('is a zip that Python reads back file for file: 1980-01-01 00:00, mode 0644, made on Unix', () => {
    const dir = tempDir('pyz-');
    try {
      const pyz = path.join(dir, 'sparsecopy.pyz');
      fs.writeFileSync(pyz, programArchive());
      const listing = spawnSync(
        PYTHON,
        [
          '-c',
          'import json, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\n' +
            'print(json.dumps({i.filename: [i.date_time, oct(i.external_attr >> 16), i.create_system, ' +
            'z.read(i).decode()] for i in z.infolist()}))',
          pyz,
        ],
        { encoding: 'utf8' },
      );
      expect(listing.stderr).toBe('');
      const entries = JSON.parse(listing.stdout) as Record<string, unknown[]>;
      const expected = fs
        .readdirSync(SPARSECOPY_DIR)
        .filter((name) => name.endsWith('.py') && !name.startsWith('test_'))
        .sort();
      expect(Object.keys(entries)).toEqual(expected);
      for (const name of expected) {
        expect(entries[name]).toEqual([
          [1980, 1, 1, 0, 0, 0],
          '0o100644',
          3,
          fs.readFileSync(path.join(SPARSECOPY_DIR, name), 'utf8'),
        ]);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('runs as `python3 sparsecopy.pyz`', () => {
    const dir = tempDir('pyz-');
    try {
      const pyz = path.join(dir, 'sparsecopy.pyz');
      fs.writeFileSync(pyz, programArchive());
      const result = spawnSync(PYTHON, [pyz, '--help'], { encoding: 'utf8', cwd: dir });
      expect(result.stderr).toBe('');
      expect(result.status).toBe(0);
      expect(result.stdout).toMatch(/\{copy,inspect,device,job,put-snapshot\}/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('is written once, under a path named by its hash, for the asset (same bytes, same path)', () => {
    const archive = programArchive();
    const file = programFile(archive);
    expect(path.basename(path.dirname(file))).toBe(
      `ebs-snapshot-compactor-sparsecopy-${programSha256(archive)}`,
    );
    expect(fs.readFileSync(file).equals(archive)).toBe(true);
    expect(programFile(archive)).toBe(file);
  });

  test('the rendered document pins its SHA-256, not the program, and stays far under the 64 KB SSM limit', () => {
    const content = renderCommandDocument();
    const size = Buffer.byteLength(JSON.stringify(content));
    // 65,241 bytes with the program embedded as base64 (before issue #11); the two presigned URLs count too
    expect(size).toBeLessThan(8 * 1024);
    expect(size + 2 * 4008).toBeLessThan(MAX_DOCUMENT_BYTES);
    const script = scripts(content).join('\n');
    expect(script).not.toContain(PROGRAM_PLACEHOLDER);
    expect(script).not.toContain(programArchive().toString('base64').slice(0, 200));
    expect(script.split(programSha256(programArchive())).length - 1).toBe(2);
  });
});

/**
 * The compact-volumes script is fetch-check-and-run: it re-runs itself under bash, fetches the program from
 * ProgramUrl (start_compaction's presigned GET of the asset), runs it only if its SHA-256 is the pinned one and
 * hands every other parameter, as it is, to `sparsecopy job` (ssm-documents/sparsecopy/job.py, tested in
 * test/dataplane/test_job.py). Run here the way the SSM agent runs it (`sh _script.sh`, parameters substituted
 * into the text) with the real program and Python, served by a local HTTP server.
 */
describe('the compact-volumes script', () => {
  const content = renderCommandDocument();
  const script = scripts(content).join('\n');
  const served = tempDir('served-');
  let server: ChildProcess;
  let base = '';

  beforeAll(async () => {
    fs.writeFileSync(path.join(served, 'sparsecopy.pyz'), programArchive());
    // the same program with one byte more: a swapped object
    fs.writeFileSync(path.join(served, 'other.pyz'), Buffer.concat([programArchive(), Buffer.from('\n')]));
    server = spawn(PYTHON, ['-u', '-m', 'http.server', '0', '--bind', '127.0.0.1', '--directory', served], {
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    base = await new Promise<string>((resolve, reject) => {
      server.stdout!.on('data', (chunk: Buffer) => {
        const port = /port (\d+)/.exec(chunk.toString());
        if (port) resolve(`http://127.0.0.1:${port[1]}`);
      });
      server.on('exit', (code) => reject(new Error(`http.server exited ${code}`)));
    });
  });

  afterAll(() => {
    server?.kill();
    fs.rmSync(served, { recursive: true, force: true });
  });

  const PARAMETERS = {
    ProgramUrl: 'set in runScript',
    SourceVolumeIds: 'vol-0000000000000000a,vol-0000000000000000b',
    TargetVolumeIds: 'vol-1111111111111111a,vol-1111111111111111b',
    SourceDeviceNames: '/dev/sdf,/dev/sdg',
    TargetDeviceNames: '/dev/sdp,/dev/sdq',
    Method: 'trim',
    Jobs: '4',
    Verify: 'false',
    TimeoutSeconds: '3600',
    SourceBlocksUrl: '',
    Mode: 'copy',
    Target: 'volume',
    TargetSnapshotIds: '',
  };
  /** Target snapshot (start_compaction started the snapshots): no target volumes, no target device names. */
  const SNAPSHOT_TARGET = {
    Target: 'snapshot',
    TargetSnapshotIds: 'snap-2222222222222222a,snap-2222222222222222b',
    TargetVolumeIds: '',
    TargetDeviceNames: '',
  };

  test('is the short fetch-check-and-run: about a dozen lines of shell', () => {
    const shell = script.split('\n').filter((line) => line.trim() !== '');
    expect(shell.length).toBeLessThanOrEqual(16);
    expect(script).toMatch(/^#!\/bin\/bash\n/);
    expect(script).toContain('exec /bin/bash "$0" "$@"');
    expect(script).toContain(`--output "$work/sparsecopy.pyz" '{{ ProgramUrl }}'`);
    expect(script).toContain(
      `echo '${programSha256(programArchive())}  '"$work/sparsecopy.pyz" | sha256sum --check`,
    );
    expect(script).toContain('trap \'rm -rf "$work"\' EXIT');
    // one fetch (the program); no per-volume loop, no block-list fetch, no tar in the shell: the program does it
    expect(script.match(/^\s*curl /gm)).toHaveLength(1);
    expect(script).not.toMatch(/\bfor\b|\btar\b|source-blocks\.tar/);
  });

  test('passes every parameter to `sparsecopy job`, each in single quotes, TimeoutSeconds as its budget', () => {
    const flags: Record<string, string> = {
      SourceVolumeIds: '--source-volume-ids',
      TargetVolumeIds: '--target-volume-ids',
      SourceDeviceNames: '--source-device-names',
      TargetDeviceNames: '--target-device-names',
      Method: '--method',
      Jobs: '--jobs',
      Verify: '--verify',
      SourceBlocksUrl: '--source-blocks-url',
      Mode: '--mode',
      Target: '--target',
      TargetSnapshotIds: '--target-snapshot-ids',
    };
    expect(script).toMatch(/python3 "\$work\/sparsecopy\.pyz" job /);
    expect(Object.keys(content.parameters).sort()).toEqual(
      [...Object.keys(flags), 'ProgramUrl', 'TimeoutSeconds'].sort(),
    );
    for (const [name, flag] of Object.entries(flags)) {
      expect(script).toContain(`${flag} '{{ ${name} }}'`);
    }
    expect(content.mainSteps[0].inputs.timeoutSeconds).toBe('{{ TimeoutSeconds }}');
    // the program bounds its waits (the seal of a verified snapshot) by what is left of it
    expect(script).toContain(
      `SPARSECOPY_BUDGET_SECONDS='{{ TimeoutSeconds }}' python3 "$work/sparsecopy.pyz" job `,
    );
  });

  /** Runs the script with the parameters substituted; the devices are looked up in an empty by-id directory. */
  function runScript(parameters: Partial<typeof PARAMETERS>) {
    const dir = tempDir('document-');
    try {
      const tmp = path.join(dir, 'tmp');
      const byId = path.join(dir, 'by-id');
      fs.mkdirSync(tmp);
      fs.mkdirSync(byId);
      const values = { ...PARAMETERS, ProgramUrl: `${base}/sparsecopy.pyz`, ...parameters };
      for (const [name, value] of Object.entries(values)) {
        expect(value).toMatch(new RegExp(content.parameters[name].allowedPattern as string));
      }
      const scriptFile = path.join(dir, '_script.sh');
      fs.writeFileSync(
        scriptFile,
        script.replace(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g, (_m, name: keyof typeof values) => values[name]),
      );
      const result = spawnSync('sh', [scriptFile], {
        encoding: 'utf8',
        env: {
          PATH: `${path.dirname(PYTHON)}:${process.env.PATH}`,
          TMPDIR: tmp,
          SPARSECOPY_BY_ID_DIR: byId,
        },
      });
      return {
        status: result.status,
        stdoutLines: result.stdout.split('\n').filter((line) => line !== ''),
        stderr: result.stderr,
        leftInTmp: fs.readdirSync(tmp),
      };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  test('a program that is not the pinned one never runs: one JSON error line, exit 1, temp dir removed', () => {
    const run = runScript({ ProgramUrl: `${base}/other.pyz` });
    expect(run.stderr).not.toContain('sparsecopy:');
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      {
        error: `the fetched data-plane program is not the one this document pins (SHA-256 ${programSha256(programArchive())})`,
      },
    ]);
    expect(run.leftInTmp).toEqual([]);
  });

  test('a program that cannot be fetched is one JSON error line, exit 1 (HTTP 404: curl does not retry)', () => {
    const run = runScript({ ProgramUrl: `${base}/missing.pyz` });
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      { error: 'could not fetch the data-plane program (curl exit 22; does the subnet reach S3?)' },
    ]);
    expect(run.stderr).toContain('404');
    expect(run.leftInTmp).toEqual([]);
  });

  test('runs the fetched job: a volume that is not attached is one JSON error line, exit 1, temp dir removed', () => {
    const run = runScript({});
    expect(run.stderr).toContain('sparsecopy: volume 1/2: vol-0000000000000000a -> vol-1111111111111111a');
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      {
        error: expect.stringMatching(
          /^sparsecopy: error: volume vol-0000000000000000a is not attached to this instance .* or as \/dev\/sdf\)/,
        ),
        sourceVolumeId: 'vol-0000000000000000a',
      },
    ]);
    expect(run.leftInTmp).toEqual([]);
  });

  test('Target snapshot runs the job into the snapshots: the first volume goes to the first snapshot', () => {
    const run = runScript(SNAPSHOT_TARGET);
    expect(run.stderr).toContain('sparsecopy: volume 1/2: vol-0000000000000000a -> snap-2222222222222222a');
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      {
        error: expect.stringMatching(
          /^sparsecopy: error: snapshot snap-2222222222222222a NOT completed, left pending until its timeout: volume vol-0000000000000000a is not attached/,
        ),
        sourceVolumeId: 'vol-0000000000000000a',
      },
    ]);
    expect(run.leftInTmp).toEqual([]);
  });

  test('Target snapshot refuses target volumes and snapshot lists that do not pair up', () => {
    const withVolumes = runScript({ ...SNAPSHOT_TARGET, TargetVolumeIds: PARAMETERS.TargetVolumeIds });
    expect(withVolumes.status).toBe(1);
    expect(JSON.parse(withVolumes.stdoutLines[0]).error).toBe(
      'Target snapshot: TargetVolumeIds and TargetDeviceNames must be empty (the copy goes into the snapshots of TargetSnapshotIds)',
    );
    const short = runScript({ ...SNAPSHOT_TARGET, TargetSnapshotIds: 'snap-2222222222222222a' });
    expect(short.status).toBe(1);
    expect(JSON.parse(short.stdoutLines[0]).error).toBe(
      'Target snapshot: SourceVolumeIds, SourceDeviceNames and TargetSnapshotIds must have the same number of items',
    );
    const volumeWithSnapshots = runScript({ TargetSnapshotIds: SNAPSHOT_TARGET.TargetSnapshotIds });
    expect(JSON.parse(volumeWithSnapshots.stdoutLines[0]).error).toBe(
      'Target volume: TargetSnapshotIds must be empty',
    );
  });

  test('lists of different lengths are refused by the job', () => {
    const run = runScript({ TargetVolumeIds: 'vol-1111111111111111a' });
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      {
        error:
          'SourceVolumeIds, TargetVolumeIds, SourceDeviceNames and TargetDeviceNames must have the same number of items',
        sourceVolumeId: 'vol-0000000000000000a',
      },
    ]);
  });
});

describe('the compact-volumes script with Target snapshot', () => {
  test('Target is volume (default) or snapshot; TargetSnapshotIds defaults to none', () => {
    const { Target, TargetSnapshotIds } = renderCommandDocument().parameters;
    expect(Target.allowedValues).toEqual(['volume', 'snapshot']);
    expect(Target.default).toBe('volume');
    expect(TargetSnapshotIds.default).toBe('');
  });
});

describe('the SourceBlocksUrl parameter', () => {
  const pattern = new RegExp(renderCommandDocument().parameters.SourceBlocksUrl.allowedPattern as string);
  const BUCKET = 'ebssnapshotcompactor-sourceblocksbucket3c7b9cc8-0a1b2c3d4e5f';

  /** URLs start_compaction would send: compactor.source_blocks.presigned_url, with a Lambda-like session. */
  function lambdaUrls(region: string, executionName: string): string {
    const result = spawnSync(
      PYTHON,
      [
        '-c',
        'import sys\nfrom compactor import source_blocks\n' +
          'print(source_blocks.presigned_url(sys.argv[1], source_blocks.bundle_key(sys.argv[2])))',
        BUCKET,
        executionName,
      ],
      {
        cwd: LAMBDAS_DIR,
        encoding: 'utf8',
        env: {
          PATH: process.env.PATH,
          PYTHONPATH: LAMBDAS_DIR,
          AWS_DEFAULT_REGION: region,
          AWS_ACCESS_KEY_ID: 'ASIAEXAMPLEEXAMPLE12',
          AWS_SECRET_ACCESS_KEY: 'x'.repeat(40),
          // Lambda session tokens run to about 1,000-1,300 characters; + / = become %XX in the URL
          AWS_SESSION_TOKEN: 'IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+/='
            .repeat(30)
            .slice(0, 1400),
          POWERTOOLS_TRACE_DISABLED: 'true',
        },
      },
    );
    expect(result.stderr).toBe('');
    return result.stdout.trim();
  }

  test("accepts no URL, the twin's http URL and what start_compaction presigns, whatever the execution name", () => {
    expect(pattern.test('')).toBe(true);
    expect(
      pattern.test('http://127.0.0.1:4566/bucket/exec-1/source-blocks.tar.gz?X-Amz-Signature=ab%2B'),
    ).toBe(true);
    // execution names may hold ' ( ) ! @ = + and non-ASCII letters: the key is percent-encoded
    for (const [region, name] of [
      ['us-east-1', 'exec-1'],
      ['eu-west-1', "run'(1)!@\u00e9=+_x"],
    ]) {
      const url = lambdaUrls(region, name);
      expect(url).toMatch(/^https:\/\/.*X-Amz-Security-Token=.*X-Amz-Signature=[0-9a-f]{64}$/);
      expect({ url, ok: pattern.test(url) }).toEqual({ url, ok: true });
    }
  });

  test.each([
    ['a single quote', "https://b.s3.amazonaws.com/k?a='$(reboot)'"],
    ['a double quote', 'https://b.s3.amazonaws.com/k?a="b"'],
    ['a space', 'https://b.s3.amazonaws.com/my key'],
    ['a backtick', 'https://b.s3.amazonaws.com/k?`reboot`'],
    ['a semicolon', 'https://b.s3.amazonaws.com/k;reboot'],
    ['a newline', 'https://b.s3.amazonaws.com/k\nreboot'],
    ['a backslash', 'https://b.s3.amazonaws.com/k\\'],
    ['a file URL', 'file:///etc/shadow'],
    ['an ftp URL', 'ftp://b.example/k'],
    ['no scheme', 'b.s3.amazonaws.com/k'],
    ['4,001 characters after the scheme', `https://${'k'.repeat(4001)}`],
  ])('refuses a value with %s (the script puts it in single quotes)', (_what, value) => {
    expect(pattern.test(value)).toBe(false);
  });

  test('accepts 4,000 characters after the scheme', () => {
    expect(pattern.test(`https://${'k'.repeat(4000)}`)).toBe(true);
  });

  test("ProgramUrl takes what start_compaction presigns for the program's asset object, and never no URL", () => {
    const programPattern = new RegExp(renderCommandDocument().parameters.ProgramUrl.allowedPattern as string);
    const result = spawnSync(
      PYTHON,
      [
        '-c',
        'import sys\nfrom compactor import source_blocks\nprint(source_blocks.presigned_url(sys.argv[1], sys.argv[2]))',
        'cdk-hnb659fds-assets-123456789012-eu-west-1',
        `${'0123456789abcdef'.repeat(4)}.pyz`,
      ],
      {
        cwd: LAMBDAS_DIR,
        encoding: 'utf8',
        env: {
          PATH: process.env.PATH,
          PYTHONPATH: LAMBDAS_DIR,
          AWS_DEFAULT_REGION: 'eu-west-1',
          AWS_ACCESS_KEY_ID: 'ASIAEXAMPLEEXAMPLE12',
          AWS_SECRET_ACCESS_KEY: 'x'.repeat(40),
          AWS_SESSION_TOKEN: 'IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ+/='
            .repeat(30)
            .slice(0, 1400),
          POWERTOOLS_TRACE_DISABLED: 'true',
        },
      },
    );
    expect(result.stderr).toBe('');
    const url = result.stdout.trim();
    expect(new URL(url).host).toBe('cdk-hnb659fds-assets-123456789012-eu-west-1.s3.eu-west-1.amazonaws.com');
    expect({ url, ok: programPattern.test(url) }).toEqual({ url, ok: true });
    expect(programPattern.test('')).toBe(false);
    expect(programPattern.test("https://b.s3.amazonaws.com/k?a='$(reboot)'")).toBe(false);
  });

  /**
   * botocore presigns with the legacy global host <bucket>.s3.amazonaws.com unless the client asks for virtual
   * addressing (lambdas/compactor/aws.py does: <bucket>.s3.<region>.amazonaws.com). Outside us-east-1
   * S3 answers a new bucket's global host with a 307 to the regional one for up to a day (the signed host no
   * longer matches), and Regions launched after March 2019 do not serve it at all (boto/boto3#2989, #3015).
   */
  test('start_compaction presigns the regional host of the bucket', () => {
    expect(new URL(lambdaUrls('eu-west-1', 'exec-1')).host).toBe(`${BUCKET}.s3.eu-west-1.amazonaws.com`);
  });
});

/**
 * The compact-volumes document restates three limits of contract/limits.json in its parameters (SSM checks
 * them before anything runs): the jobs range, the volumes per job and the document timeout. The patterns
 * stay readable in the YAML; these tests fail when they and limits.json drift apart.
 */
describe('the compact-volumes parameters agree with contract/limits.json', () => {
  const parameters = renderCommandDocument().parameters as unknown as Record<
    string,
    Parameter & { description: string }
  >;
  const pattern = (name: string) => new RegExp(parameters[name].allowedPattern as string);
  /** The whole numbers from 0 to `upTo` the parameter's pattern accepts, as [first, last, count]. */
  const accepted = (name: string, upTo: number): [number, number, number] => {
    const matching = Array.from({ length: upTo + 1 }, (_, n) => n).filter((n) => pattern(name).test(`${n}`));
    return [matching[0], matching[matching.length - 1], matching.length];
  };
  const { jobsMin, jobsMax, jobsDefault, maxVolumesPerJob, documentTimeoutSeconds } = LIMITS;

  test('Jobs takes jobsMin to jobsMax, no leading zeros, default jobsDefault', () => {
    expect(accepted('Jobs', 10 * jobsMax)).toEqual([jobsMin, jobsMax, jobsMax - jobsMin + 1]);
    expect(pattern('Jobs').test(`0${jobsMin}`)).toBe(false);
    expect(parameters.Jobs.default).toBe(`${jobsDefault}`);
    expect(parameters.Jobs.description).toContain(`(${jobsMin}-${jobsMax})`);
  });

  test('TimeoutSeconds takes 1 to documentTimeoutSeconds, which is its default', () => {
    expect(accepted('TimeoutSeconds', 2 * documentTimeoutSeconds)).toEqual([
      1,
      documentTimeoutSeconds,
      documentTimeoutSeconds,
    ]);
    expect(parameters.TimeoutSeconds.default).toBe(`${documentTimeoutSeconds}`);
    expect(parameters.TimeoutSeconds.description).toContain(`(at most ${documentTimeoutSeconds})`);
  });

  // the target lists are empty with Target snapshot (TargetSnapshotIds: with Target volume)
  const lists: [string, boolean, (i: number) => string][] = [
    ['SourceVolumeIds', false, (i) => `vol-${'0123456789abcdef'.slice(0, 16 - 1)}${i.toString(16)}`],
    ['TargetVolumeIds', true, (i) => `vol-${'fedcba9876543210'.slice(0, 16 - 1)}${i.toString(16)}`],
    ['SourceDeviceNames', false, (i) => `/dev/sd${String.fromCharCode('f'.charCodeAt(0) + i)}`],
    ['TargetDeviceNames', true, (i) => `/dev/sd${String.fromCharCode('y'.charCodeAt(0) - i)}`],
    ['TargetSnapshotIds', true, (i) => `snap-${'0123456789abcdef'.slice(0, 16 - 1)}${i.toString(16)}`],
  ];
  test.each(lists)('%s holds 1 to maxVolumesPerJob items (empty accepted: %s)', (name, empty, item) => {
    const list = (count: number) => Array.from({ length: count }, (_, i) => item(i)).join(',');
    expect(pattern(name).test('')).toBe(empty);
    expect(pattern(name).test(',')).toBe(false);
    expect(pattern(name).test(list(1))).toBe(true);
    expect(pattern(name).test(list(maxVolumesPerJob))).toBe(true);
    expect(pattern(name).test(list(maxVolumesPerJob + 1))).toBe(false);
  });
});
