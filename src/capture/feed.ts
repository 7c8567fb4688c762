// Capture's newest books over the network, for API processes on other machines that serve the
// lake from a bucket: what changed since a client's last poll, with capture's health. One
// private endpoint behind a shared secret (CAPTURE_FEED_SECRET), never on the public API's port.
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../log.js';
import type { LatestBook } from '../records.js';
import type { CaptureHealth, FeedAnswer } from '../health.js';

export interface LatestFeed {
  url: string;
  close(): Promise<void>;
}

const digest = (text: string) => createHash('sha256').update(text).digest();

export async function startLatestFeed(options: {
  latest: Map<string, LatestBook>;
  health: () => CaptureHealth;
  host: string;
  port: number;
  secret: string;
  log: Logger;
}): Promise<LatestFeed> {
  // Capture replaces a market's entry with a new object at each book: a changed object is a change.
  const seen = new Map<string, { book: LatestBook; seq: number }>();
  let seq = 0;
  // A tail's `after` counts in one process's numbering: asked with another's (capture restarted on
  // the same address, from 0, and possibly past the tail's number by now), every book is new to it.
  const feed = randomUUID();
  const changedAfter = (after: number): [string, LatestBook][] => {
    for (const [key, book] of options.latest) {
      if (seen.get(key)?.book !== book) seen.set(key, { book, seq: ++seq });
    }
    for (const key of seen.keys()) if (!options.latest.has(key)) seen.delete(key);
    const out: [string, LatestBook][] = [];
    for (const [key, s] of seen) if (s.seq > after) out.push([key, s.book]);
    return out;
  };
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
    const books = changedAfter(Number.isFinite(after) && after >= 0 ? after : 0);
    const body: FeedAnswer = { feed, seq, health: options.health(), books };
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
