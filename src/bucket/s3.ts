// The few S3 calls the lake needs (put, get to a file, head, list, delete), path-style, signed
// with SigV4, over keep-alive sockets. Any S3-compatible server: AWS, R2, GCS's XML API, Ceph's
// RADOS Gateway (which the tests run).
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { EMPTY_SHA256, canonicalQuery, sign, uriEncode } from './sigv4.js';

import type { BucketConfig } from '../config.js';

/** The bucket refused, failed or could not be reached. `status` 0: no answer (refused, reset, timed out). */
export class S3Error extends Error {
  override name = 'S3Error';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface ObjectInfo {
  key: string;
  size: number;
  etag: string;
}

type Body = { buffer: Buffer } | { file: string; size: number; sha256: string } | null;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  res: http.IncomingMessage;
}

/**
 * Answers worth asking again: none at all (a connection reset or refused), the gateway's own
 * failures and its throttling. Not a timeout: a gateway silent for S3_TIMEOUT_MS is not a moment's
 * failure, and a request waiting on a file would wait that long again. Only reads and deletes are
 * asked again: a conditional put whose success was lost on the way back would be refused the
 * second time, a failure that is not one.
 */
const TRANSIENT = new Set([0, 429, 500, 502, 503, 504]);
/** Attempts of a read or a delete in all, spaced by full-jitter exponential backoff from BACKOFF_MS (as AWS's SDKs do). */
const ATTEMPTS = 4;
const BACKOFF_MS = 100;

/** Requests this process sent, by method: what a bucket bills by (make bench-recorders reads it). */
export const S3_REQUESTS: Record<string, number> = {};
/** Reads and deletes asked again after a transient failure. */
export const S3_RETRIES = { count: 0 };

export class S3 {
  private readonly url: URL;
  private readonly agent: http.Agent;

  constructor(readonly config: BucketConfig) {
    this.url = new URL(config.endpoint);
    const Agent = this.url.protocol === 'https:' ? https.Agent : http.Agent;
    // As many as a replica asks for at once (its manifest walk).
    this.agent = new Agent({ keepAlive: true, maxSockets: 32 });
  }

  /** The full key of a path below the prefix. */
  key(rel: string): string {
    return `${this.config.prefix}${rel}`;
  }

  close(): void {
    this.agent.destroy();
  }

  private async request(
    method: string,
    key: string | null,
    opts: { query?: Record<string, string>; headers?: Record<string, string>; body?: Body } = {},
  ): Promise<Answer> {
    S3_REQUESTS[method] = (S3_REQUESTS[method] ?? 0) + 1;
    const body = opts.body ?? null;
    const payloadHash =
      body === null ? EMPTY_SHA256 : 'buffer' in body ? createHash('sha256').update(body.buffer).digest('hex') : body.sha256;
    const headers: Record<string, string> = { ...opts.headers };
    if (body) headers['content-length'] = String('buffer' in body ? body.buffer.length : body.size);
    const objectPath = `/${this.config.bucket}${key === null ? '' : `/${key}`}`;
    const signed = sign(
      { method, host: this.url.host, path: objectPath, query: opts.query, headers, payloadHash },
      { accessKeyId: this.config.accessKeyId, secretAccessKey: this.config.secretAccessKey, region: this.config.region },
      new Date(),
    );
    const qs = canonicalQuery(opts.query);
    const transport = this.url.protocol === 'https:' ? https : http;
    return new Promise<Answer>((resolve, reject) => {
      const req = transport.request(
        {
          method,
          host: this.url.hostname,
          port: this.url.port || undefined,
          path: `${uriEncode(objectPath, true)}${qs ? `?${qs}` : ''}`,
          headers: signed,
          agent: this.agent,
        },
        (res) => resolve({ status: res.statusCode ?? 0, headers: res.headers, res }),
      );
      req.setTimeout(this.config.timeoutMs, () => req.destroy(new S3Error(0, 'Timeout', `no answer in ${this.config.timeoutMs} ms`)));
      req.on('error', (err) =>
        reject(err instanceof S3Error ? err : new S3Error(0, (err as NodeJS.ErrnoException).code ?? 'Network', err.message)),
      );
      if (body && 'file' in body) {
        const stream = createReadStream(body.file);
        stream.on('error', (err) => req.destroy(err));
        stream.pipe(req);
      } else req.end(body && 'buffer' in body ? body.buffer : undefined);
    });
  }

  /** `call` (a read or a delete: the same however often sent) again while it fails transiently, up to ATTEMPTS in all; the last failure is thrown. */
  private async idempotent<T>(call: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!(err instanceof S3Error && TRANSIENT.has(err.status) && err.code !== 'Timeout') || attempt >= ATTEMPTS) throw err;
        S3_RETRIES.count++;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * BACKOFF_MS * 2 ** (attempt - 1)));
      }
    }
  }

  /** Reads the answer's body; a status outside 2xx becomes an S3Error with the server's code. */
  private async text(a: Answer, what: string): Promise<string> {
    const text = (await bodyOf(a, what)).toString('utf8');
    if (a.status >= 200 && a.status < 300) return text;
    throw new S3Error(a.status, /<Code>([^<]*)<\/Code>/.exec(text)?.[1] ?? `HTTP${a.status}`, `${what}: HTTP ${a.status}`);
  }

  /** Creates the bucket; one that exists already and is ours is fine. */
  async ensureBucket(): Promise<void> {
    const a = await this.request('PUT', null);
    try {
      await this.text(a, `create bucket ${this.config.bucket}`);
    } catch (err) {
      if (!(err instanceof S3Error && err.code === 'BucketAlreadyOwnedByYou')) throw err;
    }
  }

  /**
   * Uploads a buffer, or a file whose sha256 is known: the body is signed with that hash, so the
   * server refuses bytes that are not the ones the manifest names.
   */
  async put(
    key: string,
    body: Buffer | { file: string; size: number; sha256: string },
    meta: Record<string, string> = {},
    condition: { ifMatch?: string; ifNoneMatch?: '*' } = {},
  ): Promise<string> {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(meta)) headers[`x-amz-meta-${k}`] = v;
    // Unquoted: RGW compares the header with its stored ETag byte for byte (a quoted one never matches there).
    if (condition.ifMatch) headers['if-match'] = condition.ifMatch;
    if (condition.ifNoneMatch) headers['if-none-match'] = condition.ifNoneMatch;
    const a = await this.request('PUT', key, { headers, body: Buffer.isBuffer(body) ? { buffer: body } : body });
    await this.text(a, `put ${key}`);
    return etagOf(a.headers);
  }

  /** The object's bytes, or null when there is none. */
  async get(key: string): Promise<Buffer | null> {
    const found = await this.read(key);
    return found === null || found === 'unchanged' ? null : found.body;
  }

  /** The object with its ETag; `unchanged` when it still has `ifNoneMatch` (a 304, no body sent); null when there is none. */
  read(key: string, ifNoneMatch?: string): Promise<{ body: Buffer; etag: string } | 'unchanged' | null> {
    return this.idempotent(() => this.readOnce(key, ifNoneMatch));
  }

  private async readOnce(key: string, ifNoneMatch?: string): Promise<{ body: Buffer; etag: string } | 'unchanged' | null> {
    const a = await this.request('GET', key, ifNoneMatch ? { headers: { 'if-none-match': `"${ifNoneMatch}"` } } : {});
    if (a.status === 404 || a.status === 304) {
      await this.text(a, key).catch(() => undefined);
      return a.status === 304 ? 'unchanged' : null;
    }
    if (a.status !== 200) await this.text(a, `get ${key}`);
    return { body: await bodyOf(a, `get ${key}`), etag: etagOf(a.headers) };
  }

  /**
   * Streams an object to `dest` through a temporary file beside it, hashing as it goes; renamed
   * into place only when its size and sha256 are the expected ones. Returns false when there is
   * no such object; a wrong size or hash is an S3Error (`BadDigest`), and nothing is left behind.
   */
  download(key: string, dest: string, expect: { size: number; sha256: string }): Promise<boolean> {
    return this.idempotent(() => this.downloadOnce(key, dest, expect));
  }

  private async downloadOnce(key: string, dest: string, expect: { size: number; sha256: string }): Promise<boolean> {
    const a = await this.request('GET', key);
    if (a.status === 404) {
      await this.text(a, key).catch(() => undefined);
      return false;
    }
    if (a.status !== 200) await this.text(a, `get ${key}`);
    await fs.mkdir(path.dirname(dest), { recursive: true });
    const tmp = `${dest}.${randomBytes(4).toString('hex')}.part`;
    const hash = createHash('sha256');
    let size = 0;
    a.res.on('data', (c: Buffer) => {
      hash.update(c);
      size += c.length;
    });
    try {
      await pipeline(a.res, createWriteStream(tmp));
      const sha256 = hash.digest('hex');
      if (size !== expect.size || sha256 !== expect.sha256)
        throw new S3Error(
          200,
          'BadDigest',
          `${key}: ${size} bytes with sha256 ${sha256.slice(0, 12)}, the manifest says ${expect.size} and ${expect.sha256.slice(0, 12)}`,
        );
      await fs.rename(tmp, dest);
      return true;
    } catch (err) {
      await fs.rm(tmp, { force: true });
      throw err instanceof S3Error ? err : new S3Error(0, (err as NodeJS.ErrnoException).code ?? 'Network', (err as Error).message);
    }
  }

  head(key: string): Promise<{ size: number; modified: number; meta: Record<string, string> } | null> {
    return this.idempotent(() => this.headOnce(key));
  }

  private async headOnce(key: string): Promise<{ size: number; modified: number; meta: Record<string, string> } | null> {
    const a = await this.request('HEAD', key);
    a.res.resume();
    if (a.status === 404) return null;
    if (a.status !== 200) throw new S3Error(a.status, `HTTP${a.status}`, `head ${key}: HTTP ${a.status}`);
    const meta: Record<string, string> = {};
    for (const [k, v] of Object.entries(a.headers)) if (k.startsWith('x-amz-meta-') && typeof v === 'string') meta[k.slice(11)] = v;
    return { size: Number(a.headers['content-length']), modified: Date.parse(String(a.headers['last-modified'])), meta };
  }

  async delete(key: string): Promise<void> {
    await this.idempotent(async () => this.text(await this.request('DELETE', key), `delete ${key}`));
  }

  /** The next key segments under `prefix` (`<prefix><segment>/`), as a listing with a delimiter gives them. */
  async prefixes(prefix: string): Promise<string[]> {
    const found: string[] = [];
    let token: string | null = null;
    do {
      const query: Record<string, string> = { 'list-type': '2', prefix, delimiter: '/', 'max-keys': '1000' };
      if (token) query['continuation-token'] = token;
      const xml = await this.idempotent(async () => this.text(await this.request('GET', null, { query }), `list ${prefix}`));
      for (const m of xml.matchAll(/<CommonPrefixes>\s*<Prefix>([^<]*)<\/Prefix>\s*<\/CommonPrefixes>/g)) {
        const full = unescapeXml(m[1]);
        found.push(full.slice(prefix.length, -1));
      }
      token = /<IsTruncated>true<\/IsTruncated>/.test(xml)
        ? unescapeXml(/<NextContinuationToken>([^<]*)</.exec(xml)?.[1] ?? '') || null
        : null;
    } while (token);
    return found;
  }

  /** Every object under `prefix` (a full key prefix), in key order, after `startAfter` when given. */
  async *list(prefix: string, startAfter?: string): AsyncGenerator<ObjectInfo> {
    let token: string | null = null;
    do {
      const query: Record<string, string> = { 'list-type': '2', prefix, 'max-keys': '1000' };
      if (token) query['continuation-token'] = token;
      else if (startAfter) query['start-after'] = startAfter;
      const xml = await this.idempotent(async () => this.text(await this.request('GET', null, { query }), `list ${prefix}`));
      for (const m of xml.matchAll(/<Contents>([\s\S]*?)<\/Contents>/g)) {
        const field = (name: string) => unescapeXml(new RegExp(`<${name}>([^<]*)</${name}>`).exec(m[1])?.[1] ?? '');
        yield { key: field('Key'), size: Number(field('Size')), etag: field('ETag').replace(/"/g, '') };
      }
      token = /<IsTruncated>true<\/IsTruncated>/.test(xml)
        ? unescapeXml(/<NextContinuationToken>([^<]*)</.exec(xml)?.[1] ?? '') || null
        : null;
    } while (token);
  }
}

/** The answer's whole body; a connection lost on the way is a failure with no answer (status 0), as one lost before it. */
async function bodyOf(a: Answer, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  try {
    for await (const c of a.res) chunks.push(c as Buffer);
  } catch (err) {
    throw new S3Error(0, (err as NodeJS.ErrnoException).code ?? 'Network', `${what}: ${(err as Error).message}`);
  }
  return Buffer.concat(chunks);
}

function etagOf(headers: http.IncomingHttpHeaders): string {
  return String(headers.etag ?? '').replace(/"/g, '');
}

function unescapeXml(text: string): string {
  return text.replace(/&(lt|gt|quot|apos|amp|#\d+|#x[0-9a-f]+);/gi, (_m, e: string) => {
    const named: Record<string, string> = { lt: '<', gt: '>', quot: '"', apos: "'", amp: '&' };
    if (named[e]) return named[e];
    return String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
  });
}
