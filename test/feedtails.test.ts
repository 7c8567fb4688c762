// Several recorders' feeds into one map of newest books (a replica of a merged record): each
// market's newest book of any feed wins, one feed down leaves the others serving, and health names
// each. Real feeds (capture/feed.ts) over real HTTP.
import t from 'tap';
import { FeedTails } from '../src/bucket/feedtail.js';
import { startLatestFeed } from '../src/capture/feed.js';
import type { CaptureHealth } from '../src/health.js';
import type { LatestBook } from '../src/records.js';
import { quiet } from './helpers.js';

const SECRET = 'feed-secret-of-sixteen+';
const book = (ts: number): LatestBook => ({ ts, books: [] });

async function feedOf(latest: Map<string, LatestBook>, state: string) {
  return startLatestFeed({
    latest,
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
  const tails = new FeedTails([feedB.url, feedA.url], SECRET, latest, quiet);
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
