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
import { CopyBudget } from '../src/replay/copybudget.js';
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
    const api = await startApi(testConfig(dir, { REPLAY_COPIES: 'on', COPIES_SHARE: 'unbounded' }), duck, clock, quiet, { port: 0 });
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
      await duck.close();
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
      testConfig(run.dir, { RATE_PAID_PER_SECOND: '1000', REPLAY_CACHE_MB: '0', REPLAY_COPIES: copies, COPIES_SHARE: 'unbounded' }),
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

t.test(
  'under COPIES_SHARE: serving and replay copies within that share of the books Parquet, the markets read or ended last kept',
  async (t) => {
    const at = run.end + HOUR;
    const replayDir = path.join(run.dir, 'serving', 'replay');
    // Each API's clock starts where it is told: the budgeted ones later than every read so far (reads rank copies).
    const start = (env: Record<string, string>, from = at) =>
      startApi(testConfig(run.dir, { RATE_PAID_PER_SECOND: '1000', REPLAY_CACHE_MB: '0', ...env }), run.duck, createClock(from, 1), quiet, {
        port: 0,
      });
    const sizes = async (dir: string, suffix: string) => {
      const out = new Map<string, { bytes: number; rank: number }>();
      for (const f of await fs.readdir(dir, { recursive: true }).catch(() => [] as string[]))
        if (String(f).endsWith(suffix)) {
          const st = await fs.stat(path.join(dir, String(f)));
          out.set(String(f), { bytes: st.size, rank: st.mtimeMs });
        }
      return out;
    };
    const sum = (m: Map<string, { bytes: number }>) => [...m.values()].reduce((a, b) => a + b.bytes, 0);
    const parquet = sum(await sizes(path.join(run.dir, 'lake', 'books'), '.parquet'));
    const serving = sum(await sizes(path.join(run.dir, 'serving', 'books'), '.pages'));
    // Every finished market's copy first, unbounded: what a copy of each costs.
    const lakeApi = await start({ REPLAY_COPIES: 'off' });
    t.teardown(() => lakeApi.stop());
    {
      const api = await start({ REPLAY_COPIES: 'on', COPIES_SHARE: 'unbounded' });
      await api.replayCopies!.idle();
      await api.stop();
    }
    const every = await sizes(replayDir, '.replay');
    t.ok(every.size >= 4, `${every.size} copies`);
    const marketOf = (f: string) => path.basename(f).split('.')[0];
    // Each ranks by its last read (the earlier tests' replays), or by its market's end: its mtime.
    for (const [f, c] of every) {
      const m = lakeApi.lake.market(f.split(path.sep)[0] as Venue, marketOf(f), at)!;
      t.ok(c.rank === m.end_time || c.rank >= at, `${f}: ranked by its end or by a read (${new Date(c.rank).toISOString()})`);
    }
    const ranked = [...every].sort((a, b) => b[1].rank - a[1].rank);

    // Room for the copies ranked highest, and for any single copy (a byte more: not for another).
    const largest = Math.max(...[...every.values()].map((c) => c.bytes));
    const room = serving + Math.max(sum(new Map(ranked.slice(0, Math.floor(ranked.length / 2)))), largest) + 1;
    t.ok(room < serving + sum(every), 'not room for every copy');
    // What stays: the longest run of the highest ranked that fits.
    const newest: typeof ranked = [];
    for (const c of ranked) {
      if (serving + sum(new Map([...newest, c])) > room) break;
      newest.push(c);
    }
    const share = room / parquet;
    // The budget as the service keeps it, on these files: the copies ranked lowest removed until the rest fit.
    await new CopyBudget(replayDir, path.join(run.dir, 'serving', 'books'), () => parquet, share).settle();
    const settled = await sizes(replayDir, '.replay');
    t.same(
      [...settled.keys()].sort(),
      newest.map(([f]) => f).sort(),
      `the ${newest.length} copies ranked highest kept, the others removed`,
    );

    const api = await start({ REPLAY_COPIES: 'on', COPIES_SHARE: String(share) }, at + HOUR);
    t.teardown(() => api.stop());
    const copies = api.replayCopies!;
    const within = async (what: string) => {
      const on = await sizes(replayDir, '.replay');
      t.ok(
        serving + sum(on) <= share * parquet,
        `${what}: on disk ${serving} + ${sum(on)} B, within ${Math.floor(share * parquet)} B (${share.toFixed(3)}x of ${parquet} B)`,
      );
      return on;
    };
    await copies.idle();
    await within('after the start');
    // The start's sweep may write a copy that did not fit (the room is guessed, from the copies' mean size); sweeps after settle.
    copies.sweep(at + HOUR);
    await copies.idle();
    const swept = copies.stats.written;
    copies.sweep(at + HOUR);
    await copies.idle();
    t.equal(copies.stats.written, swept, `sweeps settle: ${swept} written since the start, none by the last`);
    const kept = await within('after the sweeps');
    const health = ((await (await fetch(`${api.url}/v3/health`)).json()) as { data: { api: { replay: Record<string, number> } } }).data.api
      .replay;
    t.equal(health.copies_bytes, sum(kept), 'health: the replay copies kept');
    t.equal(health.serving_copies_bytes, serving, 'health: the serving copies beside them');
    t.equal(health.copies_budget_bytes, Math.round(share * parquet - serving), 'health: what replay copies may take');

    // A market without a copy plays from the lake, the same messages; replayed twice, it earns a copy
    // (ranked by that read: the newest) and an older one makes room for it.
    const [gone] = ranked.map(([f]) => f).filter((f) => !kept.has(f));
    const venue = gone.split(path.sep)[0] as Venue;
    const m = api.lake.market(venue, marketOf(gone), at)!;
    const query = `from=${START}&to=${run.end}&speed=max`;
    const fromLake = await replay(lakeApi.url, await key(lakeApi), venue, m, query);
    t.ok(fromLake.length > 20, `${fromLake.length} messages of ${venue} ${m.market_id}`);
    const reads = copies.stats.reads;
    t.same(await replay(api.url, await key(api), venue, m, query), fromLake, 'without its copy: the same messages');
    await copies.idle();
    t.equal(copies.stats.written, swept, 'replayed once: not worth a copy');
    t.same(await replay(api.url, await key(api), venue, m, query), fromLake, 'again: the same messages');
    await copies.idle();
    t.equal(copies.stats.written, swept + 1, 'replayed twice: its copy written');
    const after = await within('after its copy');
    t.ok(after.has(gone), 'its copy kept');
    if (serving + sum(kept) + every.get(gone)!.bytes > room)
      t.ok(
        [...kept.keys()].some((f) => !after.has(f)),
        'a copy read longer ago removed for it',
      );
    t.same(await replay(api.url, await key(api), venue, m, query), fromLake, 'then read from its copy: the same messages');
    t.equal(copies.stats.reads, reads + 1, 'one read of a copy, the last replay');

    // No room at all: no replay copy is kept, and replays are the same.
    await api.stop();
    const none = await start({ REPLAY_COPIES: 'on', COPIES_SHARE: '0' });
    t.teardown(() => none.stop());
    await none.replayCopies!.idle();
    t.equal((await sizes(replayDir, '.replay')).size, 0, 'COPIES_SHARE=0: every replay copy removed');
    t.same(await replay(none.url, await key(none), venue, m, query), fromLake, 'and the replay is the same');
  },
);

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
