import { ChildProcess, spawn, spawnSync } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as YAML from 'yaml';
import { LAMBDAS_DIR } from '../../lib/task-functions';
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
    pyz="$1"
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
        # what each copy got as its block list (the file is gone when the script ends)
        prev=""
        blocks=""
        for arg in "$@"; do
          if [ "$prev" = "--source-blocks" ]; then blocks="$arg"; echo "$1 $(cat "$arg")" >> "$FAKE_LOG.blocks"; fi
          prev="$arg"
        done
        echo "copying $1 to $2" >&2
        echo "a progress line on stdout"
        if [ "$1" = "/dev/fake-$FAKE_FAIL_COPY" ]; then echo 'sparsecopy: error: read error on "'"$1"'" at 4096'"\${FAKE_ERROR_TAIL:-}" >&2; exit 1; fi
        if [ "$1" = "/dev/fake-$FAKE_NO_SUMMARY" ]; then echo "done"; exit 0; fi
        exec "$REAL_PYTHON" -c "$FAKE_SUMMARY_PY" "$1" "$blocks"
        ;;
      summarize)
        if [ -n "\${FAKE_SUMMARIZE_CRASH:-}" ]; then echo "sparsecopy: error: internal error: boom" >&2; exit 3; fi
        exec "$REAL_PYTHON" "$pyz" summarize "$@"
        ;;
      *) echo "unexpected command $command" >&2; exit 9 ;;
    esac
    ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
`;

  /**
   * What `sparsecopy copy` prints as its last stdout line, for the source device in argv[1]: the byte
   * counts are 1000 and 42 times the last hex digit of the volume id, FAKE_PARTITIONS partitions
   * (default 2) with a note of FAKE_NOTE_LENGTH characters (default none); with a block list (argv[2]), the
   * blocks it lists as held_blocks and one fewer as held_blocks_read, else both null (as the program does).
   */
  const FAKE_SUMMARY_PY = [
    'import json, os, sys',
    'digit = int(sys.argv[1][-1], 16)',
    'count = int(os.environ.get("FAKE_PARTITIONS", "2"))',
    'note = ("dirty NTFS volume, copied raw " * 1000)[: int(os.environ.get("FAKE_NOTE_LENGTH", "0"))]',
    'parts = [{"number": n + 1, "start": (n + 1) << 20, "size": 1 << 30, "fs": "ntfs", "method": "raw",',
    '          "allocated_bytes": 1 << 30, "fsck": "not checked: ntfs has no checker"} for n in range(count)]',
    'for part in parts:',
    '    if note: part["note"] = note',
    'held = sum(r[1] for r in json.load(open(sys.argv[2]))["BlockRanges"]) if sys.argv[2] else None',
    'print(json.dumps({"source_bytes_read": 1000 * digit, "target_bytes_written": 42 * digit,',
    '                  "partitions": parts, "verified": True, "seconds": 1.5, "table": "gpt",',
    '                  "outside_partitions_bytes": 1048576, "held_blocks": held,',
    '                  "held_blocks_read": None if held is None else held - 1}))',
  ].join('\n');

  const DEFAULT_PARAMETERS = {
    SourceVolumeIds: 'vol-0000000000000000a,vol-0000000000000000b',
    TargetVolumeIds: 'vol-1111111111111111a,vol-1111111111111111b',
    SourceDeviceNames: '/dev/sdf,/dev/sdg',
    TargetDeviceNames: '/dev/sdp,/dev/sdq',
    Method: 'allocated',
    Jobs: '16',
    Verify: 'true',
    TimeoutSeconds: '3600',
    SourceBlocksUrl: '',
  };

  /** `extraBin`: more fake programs (name -> script) put before the real ones on PATH. */
  function runScript(
    parameters: Partial<typeof DEFAULT_PARAMETERS>,
    env: Record<string, string> = {},
    extraBin: Record<string, string> = {},
  ) {
    const dir = tempDir('document-');
    try {
      const bin = path.join(dir, 'bin');
      const tmp = path.join(dir, 'tmp');
      fs.mkdirSync(bin);
      fs.mkdirSync(tmp);
      fs.writeFileSync(path.join(bin, 'python3'), FAKE_PYTHON3, { mode: 0o755 });
      for (const [name, text] of Object.entries(extraBin)) {
        fs.writeFileSync(path.join(bin, name), text, { mode: 0o755 });
      }
      const values = { ...DEFAULT_PARAMETERS, ...parameters };
      // the real program: the fake python3 passes `summarize` on to it
      const content = renderCommandDocument();
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
        maxBuffer: 64 * 1024 * 1024, // the full per-partition details on stderr
        env: {
          PATH: `${bin}:${process.env.PATH}`,
          TMPDIR: tmp,
          FAKE_LOG: log,
          FAKE_SUMMARY_PY,
          REAL_PYTHON: PYTHON,
          ...env,
        },
      });
      return {
        status: result.status,
        stdout: result.stdout,
        stdoutLines: result.stdout.split('\n').filter((line) => line !== ''),
        stderr: result.stderr,
        calls: fs.readFileSync(log, 'utf8').trim().split('\n'),
        /** "<source device> <content of its --source-blocks file>" per copy that got one. */
        blockLists: fs.existsSync(`${log}.blocks`)
          ? fs.readFileSync(`${log}.blocks`, 'utf8').trim().split('\n')
          : [],
        leftInTmp: fs.readdirSync(tmp),
      };
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  /** The stdout entry of one volume whose fake summary has 2 partitions without notes. */
  function entry(source: string, target: string, digit: number) {
    return {
      sourceVolumeId: source,
      targetVolumeId: target,
      source_bytes_read: 1000 * digit,
      target_bytes_written: 42 * digit,
      outside_partitions_bytes: 1048576,
      held_blocks: null,
      held_blocks_read: null,
      verified: true,
      seconds: 1.5,
      table: 'gpt',
      partition_count: 2,
      methods: { raw: 2 },
      fsck: { not_checked: 2 },
      note_count: 0,
      notes: [],
    };
  }

  test('success: one JSON line with each pair and its bounded summary, details on stderr, temp dir removed', () => {
    const run = runScript({});
    expect(run.stderr).toContain(
      'copying /dev/fake-vol-0000000000000000a to /dev/fake-vol-1111111111111111a',
    );
    expect(run.status).toBe(0);
    expect(run.stdoutLines).toHaveLength(1);
    expect(JSON.parse(run.stdoutLines[0])).toEqual({
      volumes: [
        entry('vol-0000000000000000a', 'vol-1111111111111111a', 10),
        entry('vol-0000000000000000b', 'vol-1111111111111111b', 11),
      ],
    });
    // every partition's full summary goes to stderr (the command log group)
    expect(run.stderr).toMatch(
      /summary of volume 2\/2 vol-0000000000000000b -> vol-1111111111111111b partition 2: \{"number": 2, /,
    );
    expect(run.calls.slice(0, 6)).toEqual([
      'device vol-0000000000000000a --device-name /dev/sdf',
      'device vol-1111111111111111a --device-name /dev/sdp',
      'copy /dev/fake-vol-0000000000000000a /dev/fake-vol-1111111111111111a --method allocated --jobs 16 --verify',
      'device vol-0000000000000000b --device-name /dev/sdg',
      'device vol-1111111111111111b --device-name /dev/sdq',
      'copy /dev/fake-vol-0000000000000000b /dev/fake-vol-1111111111111111b --method allocated --jobs 16 --verify',
    ]);
    expect(run.calls[6]).toMatch(
      /^summarize --source-volume-ids vol-0000000000000000a,vol-0000000000000000b --target-volume-ids vol-1111111111111111a,vol-1111111111111111b \S+\/stdout\.0 \S+\/stdout\.1$/,
    );
    expect(run.calls).toHaveLength(7);
    expect(run.leftInTmp).toEqual([]);
  });

  test('10 volumes of 128 partitions with long notes: stdout stays one parseable line under 24,000 characters', () => {
    const ids = (prefix: string) =>
      Array.from({ length: 10 }, (_v, i) => `vol-${prefix}${i.toString(16)}`).join(',');
    const devices = (first: number) =>
      Array.from({ length: 10 }, (_v, i) => `/dev/sd${String.fromCharCode(first + i)}`).join(',');
    const run = runScript(
      {
        SourceVolumeIds: ids('0000000000000000'),
        TargetVolumeIds: ids('1111111111111111'),
        SourceDeviceNames: devices('f'.charCodeAt(0)),
        TargetDeviceNames: devices('p'.charCodeAt(0)),
      },
      { FAKE_PARTITIONS: '128', FAKE_NOTE_LENGTH: '3000' },
    );
    expect(run.status).toBe(0);
    expect(run.stdoutLines).toHaveLength(1);
    // the bound the program enforces: 10 entries of at most 2,000 characters and the envelope
    expect(run.stdout.length).toBeLessThanOrEqual(20023 + 1);
    const volumes = JSON.parse(run.stdoutLines[0]).volumes;
    expect(volumes).toHaveLength(10);
    volumes.forEach((volume: Record<string, unknown>, i: number) => {
      expect(JSON.stringify(volume).length).toBeLessThanOrEqual(2000);
      // what the report reads, and the counts
      expect(volume).toMatchObject({
        sourceVolumeId: `vol-0000000000000000${i.toString(16)}`,
        targetVolumeId: `vol-1111111111111111${i.toString(16)}`,
        source_bytes_read: 1000 * i,
        target_bytes_written: 42 * i,
        partition_count: 128,
        methods: { raw: 128 },
        note_count: 128,
      });
      const notes = volume.notes as string[];
      expect(notes.length).toBeGreaterThan(0);
      expect(notes.length).toBeLessThan(128);
      for (const note of notes) {
        expect(note).toMatch(/^partition \d+ \(ntfs, raw\): dirty NTFS volume, copied raw .*\.\.\.$/);
        expect(note.length).toBeLessThanOrEqual(240);
      }
    });
    // the details that stdout leaves out are all on stderr
    expect(run.stderr).toContain(
      'summary of volume 10/10 vol-00000000000000009 -> vol-11111111111111119 partition 128: ',
    );
    expect(run.stderr).toContain(`"note": "${'dirty NTFS volume, copied raw '.repeat(100).slice(0, 3000)}"`);
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

  test('a failed copy with a very long error line: the error is cut to 1,000 JSON characters, the line parses', () => {
    const tail = ` ${'é"\\'.repeat(2000)}`;
    const run = runScript({}, { FAKE_FAIL_COPY: 'vol-0000000000000000a', FAKE_ERROR_TAIL: tail });
    expect(run.status).toBe(1);
    expect(run.stdoutLines).toHaveLength(1);
    expect(run.stdoutLines[0].length).toBeLessThanOrEqual(1064);
    const line = JSON.parse(run.stdoutLines[0]);
    expect(line.sourceVolumeId).toBe('vol-0000000000000000a');
    expect(line.error).toMatch(
      /^sparsecopy: error: read error on "\/dev\/fake-vol-0000000000000000a" at 4096 \\xe9"\\/,
    );
    expect(line.error).toMatch(/\.\.\.$/);
    expect(JSON.stringify(line.error).length - 2).toBeGreaterThan(990);
    expect(JSON.stringify(line.error).length - 2).toBeLessThanOrEqual(1000);
  });

  test('a summarize that fails without its line: the last stderr line becomes the error line', () => {
    const run = runScript({}, { FAKE_SUMMARIZE_CRASH: '1' });
    expect(run.status).toBe(1);
    expect(run.stdoutLines.map((line) => JSON.parse(line))).toEqual([
      { error: 'sparsecopy: error: internal error: boom', sourceVolumeId: 'vol-0000000000000000a' },
    ]);
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

  /**
   * The block lists as the instance gets them: a local HTTP server (python -m http.server, a process of its
   * own because spawnSync blocks this one) serves a gzip tar made like list_source_blocks makes it.
   */
  describe('with source block lists', () => {
    const THREE = {
      SourceVolumeIds: 'vol-0000000000000000a,vol-0000000000000000b,vol-0000000000000000c',
      TargetVolumeIds: 'vol-1111111111111111a,vol-1111111111111111b,vol-1111111111111111c',
      SourceDeviceNames: '/dev/sdf,/dev/sdg,/dev/sdh',
      TargetDeviceNames: '/dev/sdp,/dev/sdq,/dev/sdr',
    };
    // volume 1 has no list (EBS would not list its snapshot): it is copied without one
    const LISTS: Record<string, unknown> = {
      'volume-0.json': { BlockSize: 524288, VolumeSize: 8, SnapshotId: 'snap-a', BlockRanges: [[0, 3]] },
      'volume-2.json': { BlockSize: 524288, VolumeSize: 16, SnapshotId: 'snap-c', BlockRanges: [[7, 1]] },
    };
    const QUERY =
      'X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=ASIAEXAMPLE%2F20260101%2Fus-east-1%2Fs3%2Faws4_request' +
      '&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=0123abcd';
    const MAKE_BUNDLE = [
      'import io, json, sys, tarfile',
      'with tarfile.open(sys.argv[1], "w:gz") as tar:',
      '    for name, value in json.loads(sys.argv[2]).items():',
      '        body = json.dumps(value, separators=(",", ":")).encode()',
      '        info = tarfile.TarInfo(name)',
      '        info.size = len(body)',
      '        tar.addfile(info, io.BytesIO(body))',
    ].join('\n');
    let served: string;
    let server: ChildProcess;
    let base: string;
    let requests = '';

    /** The server's request log reaches this process asynchronously. */
    async function requestLogged(line: string): Promise<string> {
      for (let i = 0; i < 100 && !requests.includes(line); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return requests;
    }

    beforeAll(async () => {
      served = tempDir('served-');
      fs.mkdirSync(path.join(served, 'exec-1'));
      const made = spawnSync(
        PYTHON,
        ['-c', MAKE_BUNDLE, path.join(served, 'exec-1', 'source-blocks.tar.gz'), JSON.stringify(LISTS)],
        { encoding: 'utf8' },
      );
      expect(made.stderr).toBe('');
      fs.writeFileSync(path.join(served, 'exec-1', 'not-a-bundle.tar.gz'), '<Error>AccessDenied</Error>');
      server = spawn(PYTHON, ['-u', '-m', 'http.server', '0', '--bind', '127.0.0.1', '--directory', served], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      server.stderr!.on('data', (chunk: Buffer) => (requests += chunk.toString()));
      const port = await new Promise<string>((resolve, reject) => {
        let out = '';
        server.stdout!.on('data', (chunk: Buffer) => {
          out += chunk.toString();
          const m = /port (\d+)/.exec(out);
          if (m) resolve(m[1]);
        });
        server.on('exit', (code) => reject(new Error(`http.server exited with ${code}: ${requests}`)));
      });
      base = `http://127.0.0.1:${port}`;
    });

    afterAll(() => {
      server?.kill();
      if (served) fs.rmSync(served, { recursive: true, force: true });
    });

    test('the bundle is fetched with the whole presigned query, and each listed volume gets its own file', async () => {
      const url = `${base}/exec-1/source-blocks.tar.gz?${QUERY}`;
      const run = runScript({ ...THREE, SourceBlocksUrl: url });
      expect(run.stderr).toContain('fetching the source block lists');
      expect(run.status).toBe(0);
      expect(run.stdoutLines).toHaveLength(1);
      // the copies' held blocks reach the line the report reads
      expect(
        JSON.parse(run.stdoutLines[0]).volumes.map((v: Record<string, unknown>) => [
          v.sourceVolumeId,
          v.held_blocks,
          v.held_blocks_read,
        ]),
      ).toEqual([
        ['vol-0000000000000000a', 3, 2],
        ['vol-0000000000000000b', null, null],
        ['vol-0000000000000000c', 1, 0],
      ]);
      // the & and % of the signature reached the server as they were
      const line = `"GET /exec-1/source-blocks.tar.gz?${QUERY} HTTP/1.1" 200`;
      expect(await requestLogged(line)).toContain(line);
      const copies = run.calls.filter((call) => call.startsWith('copy '));
      const flags = '--method allocated --jobs 16 --verify';
      expect(copies).toHaveLength(3);
      expect(copies[0]).toMatch(
        new RegExp(
          `^copy /dev/fake-vol-0000000000000000a /dev/fake-vol-1111111111111111a ${flags} ` +
            '--source-blocks /\\S+/blocks/volume-0\\.json$',
        ),
      );
      expect(copies[1]).toBe(`copy /dev/fake-vol-0000000000000000b /dev/fake-vol-1111111111111111b ${flags}`);
      expect(copies[2]).toMatch(
        new RegExp(
          `^copy /dev/fake-vol-0000000000000000c /dev/fake-vol-1111111111111111c ${flags} ` +
            '--source-blocks /\\S+/blocks/volume-2\\.json$',
        ),
      );
      // each file holds that volume's list, as the bundle had it
      expect(run.blockLists).toEqual([
        `/dev/fake-vol-0000000000000000a ${JSON.stringify(LISTS['volume-0.json'])}`,
        `/dev/fake-vol-0000000000000000c ${JSON.stringify(LISTS['volume-2.json'])}`,
      ]);
      expect(run.leftInTmp).toEqual([]);
    });

    test('an empty SourceBlocksUrl fetches nothing and passes no --source-blocks', () => {
      const curl = '#!/bin/sh\necho "curl $*" >> "$FAKE_LOG"\nexit 7\n';
      const run = runScript({ ...THREE, SourceBlocksUrl: '' }, {}, { curl });
      expect(run.status).toBe(0);
      expect(run.calls.filter((call) => call.startsWith('curl'))).toEqual([]);
      expect(run.calls.filter((call) => call.startsWith('copy '))).toHaveLength(3);
      expect(run.calls.filter((call) => call.includes('--source-blocks'))).toEqual([]);
      expect(run.blockLists).toEqual([]);
      expect(run.stderr).not.toContain('fetching the source block lists');
    });

    test('a failed download (404): one JSON error line naming the block lists, exit 1, nothing copied', () => {
      const run = runScript({ ...THREE, SourceBlocksUrl: `${base}/exec-1/gone.tar.gz?${QUERY}` });
      expect(run.status).toBe(1);
      expect(run.stdoutLines).toHaveLength(1);
      expect(JSON.parse(run.stdoutLines[0])).toEqual({
        error: expect.stringMatching(
          /^could not fetch the source block lists .*: curl: \(22\) The requested URL returned error: 404/,
        ),
        sourceVolumeId: 'vol-0000000000000000a',
      });
      expect(run.calls.filter((call) => call !== '')).toEqual([]);
      expect(run.leftInTmp).toEqual([]);
    });

    test('a body that is not a gzip tar: one JSON error line naming the block lists, exit 1, nothing copied', () => {
      const run = runScript({ ...THREE, SourceBlocksUrl: `${base}/exec-1/not-a-bundle.tar.gz?${QUERY}` });
      expect(run.status).toBe(1);
      expect(run.stdoutLines).toHaveLength(1);
      expect(JSON.parse(run.stdoutLines[0])).toEqual({
        error: expect.stringMatching(/^could not unpack the source block lists: .*gzip/),
        sourceVolumeId: 'vol-0000000000000000a',
      });
      expect(run.calls.filter((call) => call !== '')).toEqual([]);
      expect(run.leftInTmp).toEqual([]);
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

  test('lists of different lengths are refused', () => {
    const run = runScript({ TargetVolumeIds: 'vol-1111111111111111a' });
    expect(run.status).toBe(1);
    expect(JSON.parse(run.stdoutLines[0]).error).toMatch(/same number of items/);
  });
});
