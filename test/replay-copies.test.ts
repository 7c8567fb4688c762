// Replay copies at a market's end, both venues: capture seals a market's rows once it is over (not
// its hour), and the API beside it writes the market's replay copy then, while the hour's other
// markets are still recorded. The copy made then is the one later replays read (the hour's seal
// does not change what it was made of), and it plays exactly what the lake renders.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import WebSocket from 'ws';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import type { Venue } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import type { StoredMarket } from '../src/lake/reader.js';
import { copyContents } from '../src/replay/copy.js';
import { tapeSpan } from '../src/replay/tape.js';
import { WALLET_TOPIC_PREFIX } from '../src/replay/wallet.js';
import { HOUR, SECOND } from '../src/time.js';
import { MARKET_CHANNEL } from '../src/venues/polymarket/channel.js';
import { walletTopics } from '../src/venues/wallet/channel.js';
import { quiet, sleep, testConfig } from './helpers.js';
import { OPEN, streamRun } from './streamrun.js';

const START = OPEN + 250 * SECOND;
/** The end of the run's first five-minute markets. */
const ENDED = OPEN + 300 * SECOND;
const VENUES: Venue[] = ['polymarket', 'wallet-prediction'];

/** The copies of a market on disk (one per signature; the newest replaces older ones). */
const copiesOf = async (dir: string, venue: Venue, m: StoredMarket) =>
  (await fs.readdir(path.join(dir, 'serving', 'replay', venue, m.market_id.slice(-2))).catch(() => [] as string[])).filter(
    (f) => f.startsWith(`${m.market_id}.`) && f.endsWith('.replay'),
  );

interface AtEnd {
  venue: Venue;
  market: StoredMarket;
  file: string;
  /** The run's clock when the copy was first seen. */
  at: number;
  /** Whether the market's hour still had rows in the spool then, and whether the market had. */
  hourSpooled: boolean;
  marketSpooled: boolean;
}
const atEnd: AtEnd[] = [];

const run = await streamRun(t, {}, 5, 10, {
  start: START,
  spanMs: 80 * SECOND,
  env: { CAPTURE_VENUES: VENUES.join(','), CAPTURE_STREAM: VENUES.join(',') },
  // The API a service runs beside capture, on the same lake and clock, replay copies on.
  during: async (_capture, clock, { dir }) => {
    const duck = await Duck.open(1);
    const api = await startApi(testConfig(dir, { REPLAY_COPIES: 'on' }), duck, clock, quiet, { port: 0 });
    try {
      // Bounded only against a hang: how long a starved machine takes is for the comment below, not an assertion.
      for (let waited = 0; waited < 240_000 && atEnd.length < VENUES.length; waited += 100) {
        await sleep(100);
        for (const venue of VENUES) {
          if (atEnd.some((e) => e.venue === venue)) continue;
          const now = clock.now();
          for (const m of api.lake.walk('desc', now)) {
            if (m.venue !== venue || m.window !== '5m' || m.end_time !== ENDED) continue;
            const files = await copiesOf(dir, venue, m);
            if (!files.length) continue;
            const { partitions } = tapeSpan('books', m);
            atEnd.push({
              venue,
              market: m,
              file: files[0],
              at: now,
              hourSpooled: api.lake.spooled(partitions),
              marketSpooled: api.lake.spooled(partitions, m.market_id),
            });
            break;
          }
        }
      }
    } finally {
      await api.stop();
      duck.close();
    }
  },
});

t.test('a market that ended is copied at its end, for both venues, while its hour is still recorded', async (t) => {
  for (const venue of VENUES) {
    const e = atEnd.find((x) => x.venue === venue);
    if (!t.ok(e, `${venue}: a five-minute market that ended at ${new Date(ENDED).toISOString()} got its copy during the run`)) continue;
    t.ok(e!.at < OPEN + HOUR, `${venue}: before its hour was over`);
    t.ok(e!.hourSpooled, `${venue}: its hour's other markets still in the spool`);
    t.notOk(e!.marketSpooled, `${venue}: none of its own rows left there (capture sealed them at its end)`);
    t.comment(`${venue}: copy seen ${((e!.at - ENDED) / SECOND).toFixed(1)} simulated s after the market's end (the run at 10x)`);
  }
});

t.test('the copy made at the end is the one later replays read: the same messages as rendered from the lake', async (t) => {
  const at = run.end + HOUR;
  const start = (copies: 'on' | 'off') =>
    startApi(
      testConfig(run.dir, { RATE_PAID_PER_SECOND: '1000', REPLAY_CACHE_MB: '0', REPLAY_COPIES: copies }),
      run.duck,
      createClock(at, 1),
      quiet,
      { port: 0 },
    );
  const lakeApi = await start('off');
  t.teardown(() => lakeApi.stop());
  const copyApi = await start('on');
  t.teardown(() => copyApi.stop());
  await copyApi.replayCopies!.idle();
  for (const e of atEnd) {
    const m = copyApi.lake.market(e.venue, e.market.market_id, at)!;
    const files = await copiesOf(run.dir, e.venue, m);
    // Only a newer version of the market (its resolution, say) is a reason for another copy: the hour's seal is not.
    if (m.ts === e.market.ts) t.same(files, [e.file], `${e.venue}: the copy written at its end, unchanged by the hour's seal`);
    else t.equal(files.length, 1, `${e.venue}: one copy, of the market's newer version`);
    // Ladders only where the walk reads them (Polymarket's start renders a hashed `book`); the replays below start mid-window.
    const contents = copyContents(await fs.readFile(path.join(run.dir, 'serving', 'replay', e.venue, m.market_id.slice(-2), files[0])));
    t.equal(contents.ladders, e.venue === 'polymarket', `${e.venue}: its copy keeps ladders only if its walk reads them`);
    t.equal(contents.packed[2] === 0, e.venue !== 'polymarket', `${e.venue}: ${contents.packed[2]} bytes of ladders`);
    for (const from of [START, ENDED - 20 * SECOND + 123]) {
      const query = `from=${from}&to=${run.end}&speed=max`;
      const reads = copyApi.replayCopies!.stats.reads;
      const fromCopy = await replay(copyApi.url, await key(copyApi), e.venue, m, query);
      t.ok(copyApi.replayCopies!.stats.reads > reads, `${e.venue} ${query}: read from its copy`);
      const fromLake = await replay(lakeApi.url, await key(lakeApi), e.venue, m, query);
      t.ok(fromLake.length > 20, `${e.venue} ${query}: ${fromLake.length} messages`);
      t.same(fromCopy, fromLake, `${e.venue} ${query}: the same messages as rendered from the lake`);
    }
  }
});

const key = async (api: Awaited<ReturnType<typeof startApi>>) => (await api.keys.issue('paid', 'copies')).key;

/** A market's messages as a client of its venue receives them (the replay's own end packet left out). */
function replay(base: string, key: string, venue: Venue, m: StoredMarket, query: string): Promise<string[]> {
  const ws = base.replace('http', 'ws');
  const wallet = walletTopics('venue-key', 'venue-secret');
  const socket =
    venue === 'polymarket'
      ? new WebSocket(`${ws}/v3/replay/polymarket/ws/market?${query}`, { headers: { Authorization: `Bearer ${key}` } })
      : new WebSocket(
          wallet.url!(`${ws}/v3/replay/wallet-prediction/sapi/wss?${query}`).replace(
            /topic=[^&]*/,
            `topic=${encodeURIComponent(`${WALLET_TOPIC_PREFIX}${m.market_id}`)}`,
          ),
          { headers: { ...wallet.headers, Authorization: `Bearer ${key}` } },
        );
  return new Promise((resolve, reject) => {
    const got: string[] = [];
    if (venue === 'polymarket')
      socket.on('open', () =>
        socket.send(
          MARKET_CHANNEL.subscribe(
            m.outcomes.map((o) => o.token_id),
            true,
          )!,
        ),
      );
    socket.on('message', (d) => {
      const frame = JSON.parse(d.toString());
      // Messages, not frames: how many go in a frame depends on what is ready when the socket takes one.
      const messages = venue === 'polymarket' ? MARKET_CHANNEL.unwrap(frame) : [frame];
      for (const x of messages) if (!JSON.stringify(x).includes('replay_end')) got.push(JSON.stringify(x));
    });
    socket.on('close', () => resolve(got));
    socket.on('error', reject);
  });
}
