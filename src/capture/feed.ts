// Capture's newest books and market versions over the network, for API processes on other
// machines that serve the lake from a bucket: what changed since a client's last poll, with
// capture's health. The versions are what the bucket cannot have yet: markets are partitioned by
// their window's start hour and sealed an hour after it, so a replica would not know the markets
// of the last hours (the ones users ask for most) until then. One
// private endpoint behind a shared secret (CAPTURE_FEED_SECRET), never on the public API's port.
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log.js';
import type { LatestBook, Market } from '../records.js';
import type { CaptureHealth, FeedAnswer } from '../health.js';
import type { Config } from '../config.js';
import type { Capture } from './capture.js';

export interface LatestFeed {
  url: string;
  close(): Promise<void>;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

export async function startLatestFeed(options: {
  latest: ReadonlyMap<string, LatestBook>;
  /** Capture's newest version of each market it knows, with when it was captured (a new entry per version). */
  known: ReadonlyMap<string, { market: Market; ts: number }>;
  health: () => CaptureHealth;
  host: string;
  port: number;
  secret: string;
  log: Logger;
}): Promise<LatestFeed> {
  // Capture replaces a market's entry with a new object at each change: a changed object is a change.
  let seq = 0;
  const changes = <T>(source: ReadonlyMap<string, T>) => {
    const seen = new Map<string, { value: T; seq: number }>();
    return (after: number): [string, T][] => {
      for (const [key, value] of source) {
        if (seen.get(key)?.value !== value) seen.set(key, { value, seq: ++seq });
      }
      for (const key of seen.keys()) if (!source.has(key)) seen.delete(key);
      const out: [string, T][] = [];
      for (const [key, s] of seen) if (s.seq > after) out.push([key, s.value]);
      return out;
    };
  };
  const books = changes(options.latest);
  const versions = changes(options.known);
  // A tail's `after` counts in one process's numbering: asked with another's (capture restarted on
  // the same address, from 0, and possibly past the tail's number by now), everything is new to it.
  const feed = randomUUID();
  const expected = digest(`Bearer ${options.secret}`);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://feed');
    // Hashes of equal length, compared in constant time: the secret's length leaks nothing either.
    if (!timingSafeEqual(digest(req.headers.authorization ?? ''), expected)) {
      res.writeHead(401).end();
      return;
    }
    if (req.method !== 'GET' || url.pathname !== '/latest') {
      res.writeHead(404).end();
      return;
    }
    const after = url.searchParams.get('feed') === feed ? Number(url.searchParams.get('after') ?? 0) : 0;
    const from = Number.isFinite(after) && after >= 0 ? after : 0;
    // Versions first: a book the answer carries has its market in it, or in an earlier answer.
    const markets = versions(from).map(([, k]) => ({ ...k.market, ts: k.ts }));
    const changed = books(from);
    const body: FeedAnswer = { feed, seq, health: options.health(), markets, books: changed };
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  server.listen(options.port, options.host);
  await new Promise<void>((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://${options.host}:${port}`;
  options.log.info({ url }, 'latest-book feed listening');
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The feed of `capture` where CAPTURE_FEED_PORT asks for one. */
export async function captureFeedOf(config: Config, capture: Capture, log: Logger): Promise<LatestFeed | null> {
  const { port, host, secret } = config.captureFeed;
  if (port === null) return null;
  return startLatestFeed({
    latest: capture.latest,
    known: capture.known,
    health: () => capture.health(),
    host,
    port,
    secret: secret!,
    log,
  });
}
