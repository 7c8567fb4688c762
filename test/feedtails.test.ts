// Several recorders' feeds into one map of newest books (a replica of a merged record): each
// market's newest book of any feed wins, one feed down leaves the others serving, and health names
// each. Real feeds (capture/feed.ts) over real HTTP.
import http from 'node:http';
import t from 'tap';
import { FeedTails } from '../src/bucket/feedtail.js';
import { startLatestFeed } from '../src/capture/feed.js';
import type { CaptureHealth } from '../src/health.js';
import type { LatestBook, Market } from '../src/records.js';
import { openMarket, quiet } from './helpers.js';

const SECRET = 'feed-secret-of-sixteen+';
const book = (ts: number): LatestBook => ({ ts, books: [] });

async function feedOf(latest: Map<string, LatestBook>, state: string, known = new Map<string, { market: Market; ts: number }>()) {
  return startLatestFeed({
    latest,
    known,
    health: () => ({ state }) as unknown as CaptureHealth,
    host: '127.0.0.1',
    port: 0,
    secret: SECRET,
    log: quiet,
  });
}

t.test("each market's newest book of any recorder's feed; one feed down, the other serves", async (t) => {
  const a = new Map([['polymarket:m1', book(100)]]);
  const b = new Map([
    ['polymarket:m1', book(200)],
    ['polymarket:m2', book(50)],
  ]);
  const feedA = await feedOf(a, 'a');
  const feedB = await feedOf(b, 'b');
  t.teardown(() => feedA.close());
  const latest = new Map<string, LatestBook>();
  const tails = new FeedTails([feedB.url, feedA.url], SECRET, latest, () => {}, quiet);
  await tails.poll();
  t.same(
    [...latest].map(([k, v]) => [k, v.ts]).sort(),
    [
      ['polymarket:m1', 200],
      ['polymarket:m2', 50],
    ],
    'the newest of each market, whichever feed had it',
  );
  t.equal(tails.reachable, true);
  t.same(
    tails.all().map((h) => [h.url, h.reachable]),
    [
      [feedB.url, true],
      [feedA.url, true],
    ],
  );
  // B goes away; A's newer book of m1 still arrives, and A speaks for capture.
  await feedB.close();
  a.set('polymarket:m1', book(300));
  await tails.poll();
  t.equal(latest.get('polymarket:m1')!.ts, 300, "A's newer book, with B gone");
  t.equal(tails.reachable, true, 'reachable while one feed answers');
  t.equal(tails.health().url, feedA.url, 'health speaks of the feed that answers');
  t.equal((tails.capture() as unknown as { state: string }).state, 'a');
  t.match(tails.all()[0].error, /./, "B's failure is named");
});

t.test('a capture restarted on the same address: every book it holds is new to the tail, however far it counted', async (t) => {
  const before = new Map([['polymarket:m1', book(100)]]);
  const first = await feedOf(before, 'first');
  const port = new URL(first.url).port;
  const latest = new Map<string, LatestBook>();
  const tails = new FeedTails([first.url], SECRET, latest, () => {}, quiet);
  // The first process counted to 3 changes.
  for (const ts of [101, 102, 103]) {
    before.set('polymarket:m1', book(ts));
    await tails.poll();
  }
  t.equal(latest.get('polymarket:m1')!.ts, 103);
  await first.close();
  // Its successor has books of another market, and has counted past the tail's number by its first poll.
  const after = new Map<string, LatestBook>();
  const second = await startLatestFeed({
    latest: after,
    known: new Map(),
    health: () => ({ state: 'second' }) as unknown as CaptureHealth,
    host: '127.0.0.1',
    port: Number(port),
    secret: SECRET,
    log: quiet,
  });
  t.teardown(() => second.close());
  // Another client (each on a new connection) has the successor count its changes before the tail asks.
  const ask = () =>
    new Promise<{ seq: number }>((resolve, reject) =>
      http
        .get(`${second.url}/latest?after=0`, { agent: false, headers: { authorization: `Bearer ${SECRET}` } }, (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as { seq: number }));
        })
        .on('error', reject),
    );
  after.set('polymarket:m2', book(50));
  await ask();
  for (const ts of [104, 105, 106, 107]) {
    after.set('polymarket:m1', book(ts));
    await ask();
  }
  t.equal((await ask()).seq, 5, "the successor's count is past the tail's");
  // The tail's first poll may find the connection the first process closed: it fails, and the next asks anew.
  for (let i = 0; i < 3; i++) if ((await tails.poll()) > 0) break;
  t.same(
    [...latest].map(([k, v]) => [k, v.ts]).sort(),
    [
      ['polymarket:m1', 107],
      ['polymarket:m2', 50],
    ],
    "the restarted capture's books, the one it changed before the tail's first poll included",
  );
});

t.test("capture's market versions reach the tail's catalogue: each version once", async (t) => {
  const version = (id: string, ts: number) => ({ market: openMarket(id, `c-${id}`, [`${id}-up`, `${id}-down`]), ts });
  const known = new Map([['polymarket:m1', version('m1', 10)]]);
  const latest = new Map([['polymarket:m1', book(100)]]);
  const feed = await feedOf(latest, 'a', known);
  t.teardown(() => feed.close());
  const heard: [string, number][] = [];
  const mine = new Map<string, LatestBook>();
  const tails = new FeedTails([feed.url], SECRET, mine, (m) => heard.push([m.market_id, m.ts]), quiet);
  await tails.poll();
  t.same(heard, [['m1', 10]], 'the version capture holds');
  await tails.poll();
  t.same(heard, [['m1', 10]], 'nothing new: nothing heard again');
  // A new version of m1 and a new market, with its first book: both versions, once.
  known.set('polymarket:m1', version('m1', 20));
  known.set('polymarket:m2', version('m2', 30));
  latest.set('polymarket:m2', book(300));
  await tails.poll();
  t.same(heard.slice(1).sort(), [
    ['m1', 20],
    ['m2', 30],
  ]);
  t.equal(mine.get('polymarket:m2')!.ts, 300);
});
