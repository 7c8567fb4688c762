// A stream thread: one share of a venue's streamed markets, with its own WebSocket connections and
// the venue's recorder (parse, apply, hash check, rows), and its rows encoded as spool lines here. What
// reaches capture's thread is a batch every BATCH_MS: encoded runs, the newest books, gap events.
import { parentPort, workerData } from 'node:worker_threads';
import { clockFromParams } from '../clock.js';
import { partitionOf } from '../lake/layout.js';
import { RunEncoder } from '../lake/spool.js';
import pino from 'pino';
import { type Book, type Market, bookRows, metricRows } from '../records.js';
import type { Quote, VenueBookSummary } from '../venues/adapter.js';
import { createRecorder } from '../venues/index.js';
import type { FromThread, StreamEvent, ThreadInit, ToThread } from './streamthreads.js';

/**
 * How often a batch goes to capture's thread, empty or not: well inside a flush, so acknowledgement
 * waits at most this much longer, and each batch says how far the thread has got (a paced clock waits for it).
 */
const BATCH_MS = 20;
/** A batch goes early past this many encoded bytes, so a burst is not held whole. */
const BATCH_BYTES = 4 * 2 ** 20;

const port = parentPort!;
const init = workerData as ThreadInit;
const clock = clockFromParams(init.clock);
// Lines go to capture's logger, so one process writes one format (pretty in a terminal) to one stream.
const log = pino({ level: init.logLevel }, { write: (line: string) => post({ type: 'log', line }) });
const encoder = new RunEncoder();
const latest = new Map<string, { ts: number; books: Book[] }>();
let events: StreamEvent[] = [];
const markets = new Map<string, Market>();
const fetches = new Map<number, { resolve: (r: { summaries: VenueBookSummary[]; recvTs: number }) => void; reject: (e: Error) => void }>();
let nextFetch = 1;

const recorder = createRecorder(init.venue, init.config, clock, log, {
  books: (m, ts, recvTs, books) => {
    const partition = partitionOf('books', m.venue, m.coin, m.window, ts);
    for (const row of bookRows(ts, recvTs, books)) encoder.book(partition, row);
    latest.set(m.market_id, { ts, books });
    if (encoder.bytes >= BATCH_BYTES) send();
  },
  metrics: (m, ts, recvTs, quotes) => {
    const partition = partitionOf('metrics', m.venue, m.coin, m.window, ts);
    for (const row of metricRows(m, ts, recvTs, quotes)) encoder.line(partition, row);
  },
  trade: (m, row) => encoder.line(partitionOf('trades', m.venue, m.coin, m.window, row.ts), row),
  lost: (m, reason, from, detail) => events.push({ kind: 'lost', market_id: m.market_id, reason, from, detail }),
  recovered: (m, at) => events.push({ kind: 'recovered', market_id: m.market_id, at }),
  tickSize: (m, tickSize, recvTs) => events.push({ kind: 'tick', market_id: m.market_id, tickSize, recvTs }),
  resolved: (m, winner, ts, recvTs) => events.push({ kind: 'resolved', market_id: m.market_id, winner, ts, recvTs }),
  ...(init.fetch
    ? {
        fetchBooks: (tokenIds: string[]) =>
          new Promise<{ summaries: VenueBookSummary[]; recvTs: number }>((resolve, reject) => {
            const id = nextFetch++;
            fetches.set(id, { resolve, reject });
            post({ type: 'fetch', id, tokenIds });
          }),
      }
    : {}),
});

function post(message: FromThread, transfer: ArrayBuffer[] = []): void {
  port.postMessage(message, transfer);
}

/** Sends what was recorded since the last batch, with the thread's liveness, counts and clock. */
function send(): void {
  const live = [...markets.values()].filter((m) => recorder.live(m)).map((m) => m.market_id);
  const stats = recorder.counts();
  const runs = encoder.take();
  // Read before `holding`, which names every kept market ended by its own (later) clock reading, so
  // one ended by `reached` is named there.
  const reached = clock.now();
  post(
    {
      type: 'batch',
      reached,
      runs,
      latest: [...latest].map(([market_id, b]) => ({ market_id, ...b })),
      events,
      live,
      holding: [...(recorder.holding?.() ?? [])],
      stats,
    },
    runs.flatMap((r) => r.chunks.map((c) => c.buffer as ArrayBuffer)),
  );
  latest.clear();
  events = [];
}

const timer = setInterval(send, BATCH_MS);

port.on('message', (msg: ToThread) => {
  switch (msg.type) {
    case 'resume':
      recorder.resumeAfter(new Map(msg.newest));
      break;
    case 'track':
      for (const m of msg.markets) markets.set(m.market_id, m);
      recorder.track(msg.markets, msg.now);
      for (const [id, m] of markets) if (m.end_time <= msg.now) markets.delete(id);
      break;
    case 'rest': {
      const m = markets.get(msg.market_id);
      // A poll's summaries and their time are all `rest` reads; an error was answered in capture's thread.
      if (m) recorder.rest(m, { books: [], summaries: msg.summaries, recvTs: msg.recvTs, quotes: [] });
      break;
    }
    case 'polled': {
      const m = markets.get(msg.market_id);
      if (m) recorder.polled(m, msg.quotes as Quote[], msg.recvTs);
      break;
    }
    case 'fetched': {
      const waiting = fetches.get(msg.id);
      fetches.delete(msg.id);
      if (msg.error !== undefined) waiting?.reject(new Error(msg.error));
      else waiting?.resolve({ summaries: msg.summaries!, recvTs: msg.recvTs! });
      break;
    }
    case 'close':
      recorder.close();
      clearInterval(timer);
      send();
      for (const f of fetches.values()) f.reject(new Error('stream closed'));
      post({ type: 'closed' });
      port.close();
      break;
  }
});
