import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

/** Write whole, fsync, rename into place, fsync the directory: readers see old or new, never half. */
export async function writeFileAtomic(file: string, data: string | Uint8Array, mode = 0o644): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const handle = await fs.open(tmp, 'w', mode);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.rename(tmp, file);
  await fsyncDir(path.dirname(file));
}

export async function fsyncFile(file: string): Promise<void> {
  const handle = await fs.open(file, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

export async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await fs.readFile(file, 'utf8')) as T;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Read at most this much per step, so a long file being followed never needs one big buffer. */
const FOLLOW_CHUNK = 4 * 1024 * 1024;

/**
 * Feeds `onLine` every complete line appended to `file` since byte `from`, and returns the
 * offset just past the last newline (a line still being written is read next time), or null
 * when the file is gone. Lines are short (a book row is a few KiB), well under one chunk.
 */
export async function followLines(file: string, from: number, onLine: (line: string) => void): Promise<number | null> {
  const handle = await fs.open(file, 'r').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    throw err;
  });
  if (!handle) return null;
  try {
    const size = (await handle.stat()).size;
    let at = from;
    const buffer = Buffer.alloc(Math.min(FOLLOW_CHUNK, Math.max(size - at, 1)));
    while (at < size) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, size - at), at);
      const end = buffer.subarray(0, bytesRead).lastIndexOf(0x0a) + 1;
      if (end === 0) break;
      for (const line of buffer.subarray(0, end).toString('utf8').split('\n')) if (line) onLine(line);
      at += end;
    }
    return at;
  } finally {
    await handle.close();
  }
}

/** Every file below `dir` whose name ends with `suffix`, as paths relative to `dir`. */
export async function listFiles(dir: string, suffix: string): Promise<string[]> {
  try {
    const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true });
    return entries
      .filter((e) => e.isFile() && e.name.endsWith(suffix))
      .map((e) => path.relative(dir, path.join(e.parentPath ?? (e as unknown as { path: string }).path, e.name)));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** Removes empty directories from `dir` up to (not including) `stop`. */
export async function pruneEmptyDirs(dir: string, stop: string): Promise<void> {
  let current = dir;
  while (current.startsWith(stop) && current !== stop) {
    try {
      await fs.rmdir(current);
    } catch {
      return;
    }
    current = path.dirname(current);
  }
}

export function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

/**
 * A per-file checkpoint (what was read of each sealed file, one JSON line per file: `{file, [field]: value}`),
 * into `into`; a damaged one is dropped whole, which only costs reading the files again.
 */
export async function readFileCheckpoint<T>(file: string, field: string, into: Map<string, T>): Promise<void> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  try {
    for (const line of text.split('\n')) {
      if (!line) continue;
      const entry = JSON.parse(line) as { file: string } & Record<string, T>;
      into.set(entry.file, entry[field]);
    }
  } catch {
    into.clear();
  }
}

/** The text of a per-file checkpoint (see readFileCheckpoint). */
export function fileCheckpointText<T>(entries: Map<string, T>, field: string): string {
  return [...entries].map(([file, value]) => `${JSON.stringify({ file, [field]: value })}\n`).join('');
}
