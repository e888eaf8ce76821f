import { createHash } from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { zipSync, Zippable } from 'fflate';
import * as YAML from 'yaml';

export const SSM_DOCUMENTS_DIR = path.join(__dirname, '..', 'ssm-documents');
export const COMPACT_VOLUMES_DOCUMENT = path.join(SSM_DOCUMENTS_DIR, 'compact-volumes.yaml');
export const SPARSECOPY_DIR = path.join(SSM_DOCUMENTS_DIR, 'sparsecopy');
/** Where the document pins the program: the SHA-256 (hex) of the zipapp the stack ships as a file asset. */
export const PROGRAM_PLACEHOLDER = '__SPARSECOPY_PYZ_SHA256__';
/**
 * SSM rejects document content over 64 KB ("This quota also includes the content specified for input parameters
 * at runtime": the two presigned URLs count too).
 */
export const MAX_DOCUMENT_BYTES = 64 * 1024;
/**
 * Every entry's time: 1980-01-01 00:00, the earliest zip (DOS) date, in local time as zip stores it, so no clock
 * or file mtime leaks into the archive and the same sources always give the same bytes (the document, and with it
 * the template, changes only when the program changes).
 */
const ZIP_MTIME = new Date(1980, 0, 1, 0, 0, 0);
/** Regular file, mode 0644, made on Unix: what `python3 -m zipapp` would record. */
const ZIP_ATTRIBUTES = { os: 3, attrs: 0o100644 << 16 };

/** Parts of the program tree that are not the program. */
function isShippedSource(relative: string): boolean {
  const parts = relative.split('/');
  const file = parts[parts.length - 1];
  return (
    file.endsWith('.py') &&
    !parts.some((part) => part === 'tests' || part === '__pycache__') &&
    !file.startsWith('test_') &&
    file !== 'conftest.py'
  );
}

function listFiles(dir: string, prefix = ''): string[] {
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) =>
      entry.isDirectory()
        ? listFiles(path.join(dir, entry.name), `${prefix}${entry.name}/`)
        : [`${prefix}${entry.name}`],
    );
}

/** The data-plane program as a zip that `python3 prog.pyz` runs (it has a top-level __main__.py). */
export function programArchive(programDir: string = SPARSECOPY_DIR): Buffer {
  if (!fs.existsSync(path.join(programDir, '__main__.py'))) {
    throw new Error(
      `${programDir}/__main__.py is missing: the stack ships the data-plane program ` +
        '(ssm-documents/sparsecopy) and cannot be built without it.',
    );
  }
  const entries: Zippable = {};
  for (const name of listFiles(programDir).filter(isShippedSource).sort()) {
    entries[name] = [fs.readFileSync(path.join(programDir, name)), ZIP_ATTRIBUTES];
  }
  return Buffer.from(zipSync(entries, { level: 9, mtime: ZIP_MTIME }));
}

export interface CommandDocumentContent {
  schemaVersion: string;
  parameters: Record<string, Record<string, unknown>>;
  mainSteps: { action: string; name: string; inputs: { runCommand: string[] } & Record<string, unknown> }[];
  [key: string]: unknown;
}

/** The SHA-256 (hex) of a program archive: what the document pins. */
export function programSha256(program: Buffer): string {
  return createHash('sha256').update(program).digest('hex');
}

/**
 * The program archive as a file for the stack's file asset: under the system temp directory, in a directory named
 * by its hash (the same bytes always give the same path and the same asset hash; written once, atomically).
 */
export function programFile(program: Buffer = programArchive()): string {
  const dir = path.join(os.tmpdir(), `ebs-snapshot-compactor-sparsecopy-${programSha256(program)}`);
  const file = path.join(dir, 'sparsecopy.pyz');
  if (fs.existsSync(file) && fs.readFileSync(file).equals(program)) return file;
  fs.mkdirSync(dir, { recursive: true });
  const partial = `${file}.${process.pid}.partial`;
  fs.writeFileSync(partial, program);
  fs.renameSync(partial, file);
  return file;
}

/** Parses a Command document and pins the program: its SHA-256 where the placeholder is. */
export function renderCommandDocument(
  documentPath: string = COMPACT_VOLUMES_DOCUMENT,
  program: Buffer = programArchive(),
): CommandDocumentContent {
  const text = fs.readFileSync(documentPath, 'utf8');
  if (!text.includes(PROGRAM_PLACEHOLDER)) {
    throw new Error(
      `${documentPath} has no ${PROGRAM_PLACEHOLDER} placeholder for the data-plane program's hash.`,
    );
  }
  const content = YAML.parse(
    text.split(PROGRAM_PLACEHOLDER).join(programSha256(program)),
  ) as CommandDocumentContent;
  const size = Buffer.byteLength(JSON.stringify(content), 'utf8');
  if (size >= MAX_DOCUMENT_BYTES) {
    throw new Error(
      `${path.basename(documentPath)} is ${size} bytes; SSM accepts under ${MAX_DOCUMENT_BYTES} with the parameters.`,
    );
  }
  return content;
}

/**
 * The Command document the transfer instance runs (AWS::SSM::Document, named by CloudFormation) and the data-plane
 * program it runs: a file asset (the CDK bootstrap bucket) whose SHA-256 the document pins. start_compaction
 * presigns a GET of the asset object (docs/data-plane.md, "How the program reaches the instance").
 */
export class CompactVolumesDocument extends Construct {
  public readonly document: ssm.CfnDocument;
  public readonly program: s3assets.Asset;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    const archive = programArchive();
    this.program = new s3assets.Asset(this, 'Program', { path: programFile(archive) });
    this.document = new ssm.CfnDocument(this, 'Resource', {
      documentType: 'Command',
      content: renderCommandDocument(COMPACT_VOLUMES_DOCUMENT, archive),
    });
  }

  get documentName(): string {
    return this.document.ref;
  }

  /** The program object's ARN: start_compaction's role signs the instance's GET of it and may read nothing else there. */
  get programObjectArn(): string {
    return this.program.bucket.arnForObjects(this.program.s3ObjectKey);
  }
}
