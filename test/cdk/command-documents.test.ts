import { spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as YAML from 'yaml';
import {
  MAX_DOCUMENT_BYTES,
  PROGRAM_PLACEHOLDER,
  programArchive,
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

describe('the embedded data-plane program', () => {
  test('is a deterministic zip that Python reads back file for file', () => {
    const archive = programArchive();
    expect(programArchive().equals(archive)).toBe(true);
    const dir = tempDir('pyz-');
    try {
      const pyz = path.join(dir, 'sparsecopy.pyz');
      fs.writeFileSync(pyz, archive);
      const listing = spawnSync(
        PYTHON,
        [
          '-c',
          'import json, sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\n' +
            'print(json.dumps({i.filename: [i.date_time[0], z.read(i).decode()] for i in z.infolist()}))',
          pyz,
        ],
        { encoding: 'utf8' },
      );
      expect(listing.stderr).toBe('');
      const entries = JSON.parse(listing.stdout) as Record<string, [number, string]>;
      const expected = fs
        .readdirSync(SPARSECOPY_DIR)
        .filter((name) => name.endsWith('.py') && !name.startsWith('test_'))
        .sort();
      expect(Object.keys(entries).sort()).toEqual(expected);
      for (const name of expected) {
        expect(entries[name]).toEqual([1980, fs.readFileSync(path.join(SPARSECOPY_DIR, name), 'utf8')]);
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
      expect(result.stdout).toMatch(/copy/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('the rendered document embeds it and stays under the 64 KB SSM limit', () => {
    const content = renderCommandDocument();
    const size = Buffer.byteLength(JSON.stringify(content));
    expect(size).toBeLessThan(MAX_DOCUMENT_BYTES);
    const script = scripts(content).join('\n');
    expect(script).not.toContain(PROGRAM_PLACEHOLDER);
    expect(script).toContain(programArchive().toString('base64'));
  });
});

/**
 * Runs the compact-volumes script the way the SSM agent does (`sh _script.sh`, parameters substituted
 * into the text) with a fake `python3` that stands in for the program and passes anything else on to
 * the real Python.
 */
describe('the compact-volumes script, run for real', () => {
  const FAKE_PYTHON3 = `#!/bin/bash
case "$1" in
  *.pyz)
    shift
    command="$1"
    shift
    echo "$command $*" >> "$FAKE_LOG"
    case "$command" in
      device)
        echo "looking up $1" >&2
        if [ "$1" = "$FAKE_FAIL_DEVICE" ]; then echo "sparsecopy: error: $1 is not attached to this instance" >&2; exit 2; fi
        echo "/dev/fake-$1"
        ;;
      copy)
        echo "copying $1 to $2" >&2
        echo "a progress line on stdout"
        if [ "$1" = "/dev/fake-$FAKE_FAIL_COPY" ]; then echo 'sparsecopy: error: read error on "'"$1"'" at 4096' >&2; exit 1; fi
        if [ "$1" = "/dev/fake-$FAKE_NO_SUMMARY" ]; then echo "done"; exit 0; fi
        echo "{\\"method\\": \\"allocated\\", \\"source\\": \\"$1\\", \\"target\\": \\"$2\\", \\"writtenBytes\\": 42}"
        ;;
      *) echo "unexpected command $command" >&2; exit 9 ;;
    esac
    ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
`;

  const DEFAULT_PARAMETERS = {
    SourceVolumeIds: 'vol-0000000000000000a,vol-0000000000000000b',
    TargetVolumeIds: 'vol-1111111111111111a,vol-1111111111111111b',
    SourceDeviceNames: '/dev/sdf,/dev/sdg',
    TargetDeviceNames: '/dev/sdp,/dev/sdq',
    Method: 'allocated',
    Jobs: '16',
    Verify: 'true',
    TimeoutSeconds: '3600',
  };

  function runScript(parameters: Partial<typeof DEFAULT_PARAMETERS>, env: Record<string, string> = {}) {
    const dir = tempDir('document-');
    try {
      const bin = path.join(dir, 'bin');
      const tmp = path.join(dir, 'tmp');
      fs.mkdirSync(bin);
      fs.mkdirSync(tmp);
      fs.writeFileSync(path.join(bin, 'python3'), FAKE_PYTHON3, { mode: 0o755 });
      const values = { ...DEFAULT_PARAMETERS, ...parameters };
      const content = renderCommandDocument(undefined, Buffer.from('not really a zip'));
      for (const [name, value] of Object.entries(values)) {
        expect(value).toMatch(new RegExp(content.parameters[name].allowedPattern as string));
      }
      const script = scripts(content)
        .join('\n')
        .replace(/\{\{\s*([A-Za-z0-9_]+)\s*\}\}/g, (_m, name: keyof typeof values) => values[name]);
      const scriptFile = path.join(dir, '_script.sh');
      fs.writeFileSync(scriptFile, script);
      const log = path.join(dir, 'calls.log');
      fs.writeFileSync(log, '');
      const result = spawnSync('sh', [scriptFile], {
        encoding: 'utf8',
        env: {
          PATH: `${bin}:${process.env.PATH}`,
          TMPDIR: tmp,
          FAKE_LOG: log,
          REAL_PYTHON: PYTHON,
          ...env,
        },
      });
      return {
        status: result.status,
        stdoutLines: result.stdout.split('\n').filter((line) => line !== ''),
        stderr: result.stderr,
        calls: fs.readFileSync(log, 'utf8').trim().split('\n'),
        leftInTmp: fs.readdirSync(tmp),
      };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  test('success: one JSON line with each pair and its summary, progress on stderr, temp dir removed', () => {
    const run = runScript({});
    expect(run.stderr).toContain(
      'copying /dev/fake-vol-0000000000000000a to /dev/fake-vol-1111111111111111a',
    );
    expect(run.status).toBe(0);
    expect(run.stdoutLines).toHaveLength(1);
    expect(JSON.parse(run.stdoutLines[0])).toEqual({
      volumes: [
        {
          sourceVolumeId: 'vol-0000000000000000a',
          targetVolumeId: 'vol-1111111111111111a',
          method: 'allocated',
          source: '/dev/fake-vol-0000000000000000a',
          target: '/dev/fake-vol-1111111111111111a',
          writtenBytes: 42,
        },
        {
          sourceVolumeId: 'vol-0000000000000000b',
          targetVolumeId: 'vol-1111111111111111b',
          method: 'allocated',
          source: '/dev/fake-vol-0000000000000000b',
          target: '/dev/fake-vol-1111111111111111b',
          writtenBytes: 42,
        },
      ],
    });
    expect(run.calls).toEqual([
      'device vol-0000000000000000a --device-name /dev/sdf',
      'device vol-1111111111111111a --device-name /dev/sdp',
      'copy /dev/fake-vol-0000000000000000a /dev/fake-vol-1111111111111111a --method allocated --jobs 16 --verify',
      'device vol-0000000000000000b --device-name /dev/sdg',
      'device vol-1111111111111111b --device-name /dev/sdq',
      'copy /dev/fake-vol-0000000000000000b /dev/fake-vol-1111111111111111b --method allocated --jobs 16 --verify',
    ]);
    expect(run.leftInTmp).toEqual([]);
  });

  test('Method, Jobs and Verify reach the program', () => {
    const run = runScript({
      SourceVolumeIds: 'vol-0000000000000000a',
      TargetVolumeIds: 'vol-1111111111111111a',
      SourceDeviceNames: '/dev/sdf',
      TargetDeviceNames: '/dev/sdp',
      Method: 'trim',
      Jobs: '4',
      Verify: 'false',
    });
    expect(run.status).toBe(0);
    expect(run.calls[2]).toBe(
      'copy /dev/fake-vol-0000000000000000a /dev/fake-vol-1111111111111111a --method trim --jobs 4',
    );
  });

  test('a failed copy: one JSON line with the program error line and the source volume, exit 1', () => {
    const run = runScript({}, { FAKE_FAIL_COPY: 'vol-0000000000000000b' });
    expect(run.status).toBe(1);
    expect(run.stdoutLines).toHaveLength(1);
    expect(JSON.parse(run.stdoutLines[0])).toEqual({
      error: 'sparsecopy: error: read error on "/dev/fake-vol-0000000000000000b" at 4096',
      sourceVolumeId: 'vol-0000000000000000b',
    });
    expect(run.leftInTmp).toEqual([]);
  });

  test('a device that cannot be found fails the same way, before any copy', () => {
    const run = runScript({}, { FAKE_FAIL_DEVICE: 'vol-1111111111111111a' });
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      {
        error: 'sparsecopy: error: vol-1111111111111111a is not attached to this instance',
        sourceVolumeId: 'vol-0000000000000000a',
      },
    ]);
    expect(run.calls.some((call) => call.startsWith('copy'))).toBe(false);
  });

  test('a copy that prints no JSON summary is a failure of that volume', () => {
    const run = runScript({}, { FAKE_NO_SUMMARY: 'vol-0000000000000000a' });
    expect(run.status).toBe(1);
    expect(run.stdoutLines).toHaveLength(1);
    expect(JSON.parse(run.stdoutLines[0])).toEqual({
      error: expect.stringMatching(/^sparsecopy copy printed no JSON summary/),
      sourceVolumeId: 'vol-0000000000000000a',
    });
  });

  test('lists of different lengths are refused', () => {
    const run = runScript({ TargetVolumeIds: 'vol-1111111111111111a' });
    expect(run.status).toBe(1);
    expect(JSON.parse(run.stdoutLines[0]).error).toMatch(/same number of items/);
  });
});
