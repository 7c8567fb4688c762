// Mirrors sealed lake files through the API: lists them, skips what is already present and
// valid, resumes partial downloads with Range, verifies every sha256, and reports failures.
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { sha256File } from './lake/fsutil.js';

export interface DownloadRequest {
  baseUrl: string;
  key: string;
  /** `wallet-prediction`, `provider-alias`, or a per-coin route's coin. */
  namespace: string;
  query: Record<string, string | undefined>;
  dest: string;
  concurrency?: number;
}

export interface ListedFile {
  dataset: string;
  coin: string;
  window: string;
  rows: number;
  bytes: number;
  sha256: string;
  url: string;
}

export interface DownloadReport {
  listed: number;
  skipped: number;
  downloaded: number;
  resumed: number;
  refetched: number;
  bytes: number;
  failed: { file: string; reason: string }[];
}

export interface DownloadProgress {
  update(done: number, total: number, bytes: number): void;
  finish(): void;
}

async function api(req: DownloadRequest, url: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(new URL(url, req.baseUrl), { headers: { authorization: `Bearer ${req.key}`, ...headers } });
}

/**
 * The files to mirror. A mirror of one dataset also gets the gaps of the same coins, windows and
 * hours: they say which spans of the data were never recorded, and `read_parquet('gaps/**')`
 * must answer in every mirror.
 */
export async function listFiles(req: DownloadRequest): Promise<ListedFile[]> {
  const files = await listDataset(req, req.query);
  if (req.query.dataset && req.query.dataset !== 'gaps') files.push(...(await listDataset(req, { ...req.query, dataset: 'gaps' })));
  return files;
}

async function listDataset(req: DownloadRequest, query: DownloadRequest['query']): Promise<ListedFile[]> {
  const files: ListedFile[] = [];
  const params = new URLSearchParams(Object.entries({ ...query, limit: '1000' }).filter(([, v]) => v) as [string, string][]);
  let cursor: string | null = null;
  do {
    const q = new URLSearchParams(params);
    if (cursor) q.set('cursor', cursor);
    const res = await api(req, `/v3/${req.namespace}/files?${q}`);
    const body = (await res.json()) as {
      data: ListedFile[];
      pagination: { has_more: boolean; next_cursor: string | null };
      error?: { message: string };
    };
    if (!res.ok) throw new Error(`listing failed: HTTP ${res.status}: ${body.error?.message ?? ''}`);
    files.push(...body.data);
    cursor = body.pagination.has_more ? body.pagination.next_cursor : null;
  } while (cursor);
  return files;
}

/** The file's place below `dest`, from its URL: the lake's own layout. */
export function localPath(dest: string, file: ListedFile): string {
  const rel = decodeURIComponent(file.url.replace(/^.*?\/files\//, ''));
  if (rel.split('/').some((s) => s === '..' || s === '') || path.isAbsolute(rel)) throw new Error(`refusing path ${rel}`);
  return path.join(dest, rel);
}

export async function download(req: DownloadRequest, progress?: DownloadProgress): Promise<DownloadReport> {
  const files = await listFiles(req);
  const report: DownloadReport = { listed: files.length, skipped: 0, downloaded: 0, resumed: 0, refetched: 0, bytes: 0, failed: [] };
  let done = 0;
  let next = 0;
  const one = async (file: ListedFile) => {
    const target = localPath(req.dest, file);
    const part = `${target}.part`;
    await fs.mkdir(path.dirname(target), { recursive: true });
    const existing = await fs.stat(target).catch(() => null);
    if (existing) {
      if (existing.size === file.bytes && (await sha256File(target)) === file.sha256) {
        report.skipped++;
        return;
      }
      report.refetched++; // present but corrupt or stale: fetched again whole
      await fs.rm(target);
    }
    let offset = (await fs.stat(part).catch(() => null))?.size ?? 0;
    if (offset > file.bytes) {
      await fs.rm(part);
      offset = 0;
    }
    if (offset < file.bytes) {
      const res = await api(req, file.url, offset > 0 ? { range: `bytes=${offset}-` } : {});
      if (res.status === 200 && offset > 0)
        offset = 0; // the server sent the whole file
      else if (offset > 0 && res.status === 206) report.resumed++;
      if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}`);
      await pipeline(
        Readable.fromWeb(res.body as import('node:stream/web').ReadableStream),
        createWriteStream(part, { flags: offset > 0 ? 'a' : 'w' }),
      );
      report.bytes += file.bytes - offset;
    }
    const sha = await sha256File(part);
    if (sha !== file.sha256) {
      await fs.rm(part, { force: true });
      throw new Error(`sha256 ${sha.slice(0, 12)}... does not match the listing's ${file.sha256.slice(0, 12)}...`);
    }
    await fs.rename(part, target);
    report.downloaded++;
  };
  await Promise.all(
    Array.from({ length: Math.min(req.concurrency ?? 4, files.length) }, async () => {
      while (next < files.length) {
        const file = files[next++];
        try {
          await one(file);
        } catch (err) {
          report.failed.push({ file: file.url, reason: (err as Error).message });
        }
        progress?.update(++done, files.length, report.bytes);
      }
    }),
  );
  progress?.finish();
  return report;
}
