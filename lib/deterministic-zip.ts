import * as zlib from 'zlib';

/**
 * A minimal zip writer (deflate, no extra fields, fixed timestamps) so the same sources always give the
 * same bytes: the Command document, and with it the template, changes only when the program changes.
 */

export interface ZipEntry {
  /** Path inside the archive, with forward slashes. */
  readonly name: string;
  readonly data: Buffer;
}

/** 1980-01-01 00:00:00, the earliest DOS date: no clock or file mtime leaks into the archive. */
const DOS_TIME = 0;
const DOS_DATE = (0 << 9) | (1 << 5) | 1;
const VERSION = 20;
const DEFLATE = 8;
const UTF8_NAMES = 1 << 11;
/** Unix mode 0644 regular file in the high 16 bits, made-by host 3 (Unix). */
const EXTERNAL_ATTRIBUTES = (0o100644 << 16) >>> 0;
const MADE_BY_UNIX = (3 << 8) | VERSION;

interface EntryFields {
  readonly crc: number;
  readonly compressedSize: number;
  readonly size: number;
  readonly nameLength: number;
}

/**
 * The 26 bytes that a local header (from offset 4) and a central-directory header (from offset 6)
 * both carry, in the same order: version needed, flags, method, time, date, CRC-32, sizes, name
 * length and extra field length (0).
 */
function writeEntryFields(header: Buffer, at: number, fields: EntryFields): void {
  header.writeUInt16LE(VERSION, at);
  header.writeUInt16LE(UTF8_NAMES, at + 2);
  header.writeUInt16LE(DEFLATE, at + 4);
  header.writeUInt16LE(DOS_TIME, at + 6);
  header.writeUInt16LE(DOS_DATE, at + 8);
  header.writeUInt32LE(fields.crc, at + 10);
  header.writeUInt32LE(fields.compressedSize, at + 14);
  header.writeUInt32LE(fields.size, at + 18);
  header.writeUInt16LE(fields.nameLength, at + 22);
  header.writeUInt16LE(0, at + 24); // extra field length
}

export function deterministicZip(entries: readonly ZipEntry[]): Buffer {
  const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const names = new Set<string>();
  const localParts: Buffer[] = [];
  const centralParts: Buffer[] = [];
  let offset = 0;
  for (const entry of sorted) {
    if (names.has(entry.name)) throw new Error(`zip: duplicate entry ${entry.name}`);
    names.add(entry.name);
    const name = Buffer.from(entry.name, 'utf8');
    const compressed = zlib.deflateRawSync(entry.data, { level: 9 });
    const crc = zlib.crc32(entry.data);

    const fields: EntryFields = {
      crc,
      compressedSize: compressed.length,
      size: entry.data.length,
      nameLength: name.length,
    };

    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    writeEntryFields(local, 4, fields);
    localParts.push(local, name, compressed);

    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE(MADE_BY_UNIX, 4);
    writeEntryFields(central, 6, fields);
    central.writeUInt16LE(0, 32); // comment length
    central.writeUInt16LE(0, 34); // disk number
    central.writeUInt16LE(0, 36); // internal attributes
    central.writeUInt32LE(EXTERNAL_ATTRIBUTES, 38);
    central.writeUInt32LE(offset, 42);
    centralParts.push(central, name);

    offset += local.length + name.length + compressed.length;
  }
  const centralDirectory = Buffer.concat(centralParts);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(0, 4);
  end.writeUInt16LE(0, 6);
  end.writeUInt16LE(sorted.length, 8);
  end.writeUInt16LE(sorted.length, 10);
  end.writeUInt32LE(centralDirectory.length, 12);
  end.writeUInt32LE(offset, 16);
  end.writeUInt16LE(0, 20);
  return Buffer.concat([...localParts, centralDirectory, end]);
}
