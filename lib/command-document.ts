import * as fs from 'fs';
import * as path from 'path';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { zipSync, Zippable } from 'fflate';
import * as YAML from 'yaml';

export const SSM_DOCUMENTS_DIR = path.join(__dirname, '..', 'ssm-documents');
export const COMPACT_VOLUMES_DOCUMENT = path.join(SSM_DOCUMENTS_DIR, 'compact-volumes.yaml');
export const SPARSECOPY_DIR = path.join(SSM_DOCUMENTS_DIR, 'sparsecopy');
export const PROGRAM_PLACEHOLDER = '__SPARSECOPY_PYZ_BASE64__';
/** SSM rejects document content over 64 KB. */
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
      `${programDir}/__main__.py is missing: the Command document embeds the data-plane program ` +
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

/** Parses a Command document and puts the base64 program where its placeholder is. */
export function renderCommandDocument(
  documentPath: string = COMPACT_VOLUMES_DOCUMENT,
  program: Buffer = programArchive(),
): CommandDocumentContent {
  const text = fs.readFileSync(documentPath, 'utf8');
  if (!text.includes(PROGRAM_PLACEHOLDER)) {
    throw new Error(`${documentPath} has no ${PROGRAM_PLACEHOLDER} placeholder for the data-plane program.`);
  }
  const content = YAML.parse(
    text.replace(PROGRAM_PLACEHOLDER, program.toString('base64')),
  ) as CommandDocumentContent;
  const size = Buffer.byteLength(JSON.stringify(content), 'utf8');
  if (size >= MAX_DOCUMENT_BYTES) {
    throw new Error(
      `${path.basename(documentPath)} with the embedded program is ${size} bytes; SSM accepts under ${MAX_DOCUMENT_BYTES}. ` +
        'Shrink the program or ship it another way (e.g. an S3 asset).',
    );
  }
  return content;
}

/** The Command document the transfer instance runs (AWS::SSM::Document, named by CloudFormation). */
export class CompactVolumesDocument extends Construct {
  public readonly document: ssm.CfnDocument;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    this.document = new ssm.CfnDocument(this, 'Resource', {
      documentType: 'Command',
      content: renderCommandDocument(),
    });
  }

  get documentName(): string {
    return this.document.ref;
  }
}
