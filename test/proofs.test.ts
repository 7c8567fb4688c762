// The copy's proofs alone, without a socket: what each check of a streamed book concludes, from
// books hashed by the client libraries' function (its vectors are checked in marketchannel.test).
import t from 'tap';
import { createClock } from '../src/clock.js';
import { StreamProgress } from '../src/venues/stream.js';
import { type ClobBookSummary, LocalBook, clobBookHash } from '../src/venues/polymarket/book.js';
import { CopyProofs, type Doubted, NO_STREAM_STATS, type Token, newToken } from '../src/venues/polymarket/proofs.js';
import { Verdicts } from '../src/venues/polymarket/verdicts.js';
import { openMarket } from './helpers.js';

const market = openMarket('m', '0x' + 'cd'.repeat(32), ['up', 'down']);
const fields = { min_order_size: '5', tick_size: '0.01', neg_risk: false, last_trade_price: '0.500' };
const summary = (ts: number, bids: [string, string][], asks: [string, string][]): ClobBookSummary => ({
  market: market.condition_id!,
  asset_id: 'up',
  timestamp: String(ts),
  bids: bids.map(([price, size]) => ({ price, size })),
  asks: asks.map(([price, size]) => ({ price, size })),
  ...fields,
});

function setup() {
  const gaps: string[] = [];
  const asked: string[] = [];
  const stats = { ...NO_STREAM_STATS };
  const verdicts = new Verdicts<Doubted, Token>(createClock(), new StreamProgress(), () => undefined);
  const proofs = new CopyProofs(
    {
      stats,
      sink: {
        books: () => undefined,
        lost: (_m, reason, from, detail) => gaps.push(`${reason} from ${from}: ${detail}`),
        recovered: () => undefined,
        metrics: () => undefined,
        tickSize: () => undefined,
      },
      verdicts,
      requestBook: (id) => asked.push(id),
      live: () => true,
      rowTime: (_m, ts) => ts,
      snapshot: () => undefined,
    },
    createClock(),
    5_000,
  );
  const first = summary(
    1_000,
    [
      ['0.47', '10'],
      ['0.48', '30'],
    ],
    [
      ['0.53', '10'],
      ['0.52', '25'],
    ],
  );
  const book = new LocalBook(market.condition_id!, 'up');
  book.reset(first, 1_000);
  book.note(first);
  // A token synced from `first`, proved then.
  const token = newToken(market, market.outcomes[0], 0, 1_000);
  Object.assign(token, { book, synced: true, verifiedTs: 1_000, check: 'snapshot', streamed: true, history: [book.state()] });
  return { proofs, token, gaps, asked, stats };
}

t.test('a change whose hash reproduces vouches for the copy by hash', async (t) => {
  const { proofs, token, gaps, stats } = setup();
  const hash = clobBookHash(
    summary(
      1_100,
      [
        ['0.47', '10'],
        ['0.48', '40'],
      ],
      [
        ['0.53', '10'],
        ['0.52', '25'],
      ],
    ),
  );
  t.equal(proofs.applyChecked(token, [{ asset_id: 'up', price: '0.48', size: '40', side: 'BUY', hash }], '1100', 1_100), 'vouched');
  t.equal(token.check, 'hash');
  t.same(token.verdict, { check: 'match', unexplained: 'match' });
  t.equal(token.verifiedTs, 1_100, 'proved at its instant');
  t.equal(stats.verified, 1);
  t.same(gaps, []);
});

t.test('best levels the copy does not have disprove it: a gap from its last proof, a REST book asked for, no row', async (t) => {
  const { proofs, token, gaps, asked, stats } = setup();
  const outcome = proofs.applyChecked(
    token,
    [{ asset_id: 'up', price: '0.48', size: '40', side: 'BUY', best_bid: '0.49', best_ask: '0.52' }],
    '1100',
    1_100,
  );
  t.equal(outcome, 'desynced');
  t.notOk(token.synced);
  t.equal(stats.mismatches, 1);
  t.match(gaps, [/^stream_resync from 1000: the venue's best bid\/ask at 1100 differ from the copy's/]);
  t.same(asked, ['up']);
});

t.test('a hash that does not reproduce holds the book in doubt, asks REST, and waits for its verdict', async (t) => {
  const { proofs, token, gaps, asked, stats } = setup();
  const outcome = proofs.applyChecked(
    token,
    [{ asset_id: 'up', price: '0.48', size: '40', side: 'BUY', hash: 'f'.repeat(40) }],
    '1100',
    1_100,
  );
  t.equal(outcome, 'vouched', 'recorded, on what checked it (nothing here)');
  t.equal(token.check, 'none');
  t.equal(token.verdict.check, undefined, 'the verdict waits for a field that may explain it');
  t.equal(token.doubt?.from, 1_000, 'in doubt since the last proof');
  t.same(asked, ['up'], "REST's word asked at once");
  t.equal(stats.unverified, 1);
  // The copy proved by a later hash: the book in doubt was never the venue's for certain.
  const hash = clobBookHash(
    summary(
      1_200,
      [
        ['0.47', '10'],
        ['0.48', '41'],
      ],
      [
        ['0.53', '10'],
        ['0.52', '25'],
      ],
    ),
  );
  proofs.applyChecked(token, [{ asset_id: 'up', price: '0.48', size: '41', side: 'BUY', hash }], '1200', 1_200);
  t.same(gaps, ['stream_resync from 1000: 1 book(s) whose hash did not reproduce before 1200']);
  t.equal(token.doubt, null);
});

t.test("stream hashes that stop reproducing are doubted until REST's own hashes stop reproducing too", async (t) => {
  const { proofs, token, gaps, stats } = setup();
  let ts = 1_000;
  // A change that moves the copy, with a hash the copy does not give (a lost change, or fields it lacks).
  const miss = () => {
    ts += 10;
    const size = String(40 + ((ts / 10) % 2));
    t.equal(
      proofs.applyChecked(token, [{ asset_id: 'up', price: '0.48', size, side: 'BUY', hash: 'f'.repeat(40) }], String(ts), ts),
      'vouched',
    );
  };
  const rest = (hash: string) => ({ ...summary(ts, [['0.47', '10']], [['0.52', '25']]), hash });
  for (let i = 0; i < 300; i++) miss();
  t.equal(stats.undoubted, 0, 'far more misses in a row than the give-way bound: still no evidence the formula changed');
  t.equal(token.doubt?.books.length, 300, 'every one held in doubt');
  // REST books whose own hash reproduces: the formula is right, the copies are not.
  const good = rest('');
  good.hash = clobBookHash(good);
  for (let i = 0; i < 5; i++) proofs.noteRestHash(good);
  for (let i = 0; i < 250; i++) miss();
  t.equal(stats.undoubted, 0, 'after REST proved the formula, still doubted');
  // REST's own hashes stop reproducing as well: the venue changed its formula.
  for (let i = 0; i < 3; i++) proofs.noteRestHash(rest('e'.repeat(40)));
  miss();
  t.equal(stats.undoubted, 1, 'taken as changed only now');
  t.same(token.verdict, { check: 'mismatch', unexplained: 'mismatch' }, 'said so at once');
  // One REST hash that reproduces again: back to doubting.
  proofs.noteRestHash(good);
  miss();
  t.equal(stats.undoubted, 1);
  t.equal(token.doubt?.books.length, 551);
  t.same(gaps, [], 'no proof came, so no gap is decided yet');
});

t.test('a REST book of the same instant with other levels disproves the copy', async (t) => {
  const { proofs, token, gaps } = setup();
  proofs.checkRest(token, summary(1_000, [['0.47', '10']], [['0.52', '25']]), 1_000, 1_050);
  t.notOk(token.synced);
  t.match(gaps, [/REST book at 1000 differs from the streamed copy of that instant/]);
});

t.test('a stream that trails REST by a little at every poll is behind, not silent; one that delivers nothing is', async (t) => {
  const ahead = (ts: number, size: string) => summary(ts, [['0.47', size]], [['0.53', '10']]);
  // The stream delivers each change a while after REST shows it, for longer than the 5 s bound.
  const behind = setup();
  for (let at = 2_000; at <= 20_000; at += 2_000) {
    behind.proofs.checkRest(behind.token, ahead(at, String(at)), at, at);
    // The change REST showed reaches the copy before the next poll.
    behind.token.book.reset(ahead(at + 500, String(at)), at + 500);
  }
  t.ok(behind.token.synced, 'still synced');
  t.same(behind.gaps, []);
  // The same REST books while the copy stays where it was: the stream never delivered them.
  const frozen = setup();
  for (let at = 2_000; at <= 20_000; at += 2_000) frozen.proofs.checkRest(frozen.token, ahead(at, String(at)), at, at);
  t.notOk(frozen.token.synced, 'desynced');
  t.match(frozen.gaps, [/the stream never delivered the change REST showed at 8000/]);
});

t.test('a REST book ahead of the stream proves the copy only once the stream has passed its instant', async (t) => {
  const bids = (b47: string, b48: string): [string, string][] => [
    ['0.47', b47],
    ['0.48', b48],
  ];
  const asks: [string, string][] = [
    ['0.53', '10'],
    ['0.52', '25'],
  ];
  const hashOf = (ts: number, b47: string, b48: string) => clobBookHash(summary(ts, bids(b47, b48), asks));
  // One bid entry at `ts`, with the venue's hash or its best levels.
  const change = (s: ReturnType<typeof setup>, ts: number, price: string, size: string, proof: { hash: string } | 'best') =>
    s.proofs.applyChecked(
      s.token,
      [{ asset_id: 'up', price, size, side: 'BUY', ...(proof === 'best' ? { best_bid: '0.48', best_ask: '0.52' } : proof) }],
      String(ts),
      ts,
    );
  // The venue: 0.48 to 40 at 1050 (lost on the way to the copy), 0.47 to 12 at 1100, 0.48 back to
  // 30 at 1250. REST answers at 1300, before the stream has delivered 1100: the venue's book then
  // is the copy's after 1100, though the copy at 1100 is not the venue's book of 1100.
  const lost = setup();
  lost.proofs.checkRest(lost.token, summary(1_300, bids('12', '30'), asks), 1_300, 1_300);
  t.equal(change(lost, 1_100, '0.47', '12', { hash: hashOf(1_100, '12', '40') }), 'vouched', 'recorded, its hash not reproduced');
  t.equal(lost.token.verifiedTs, 1_000, "REST's book of 1300 proves nothing of 1100");
  t.equal(lost.token.doubt?.from, 1_000, 'in doubt since the last proof');
  // 1250 leaves the copy as it was, and its hash reproduces: a change before it never arrived.
  t.equal(change(lost, 1_250, '0.48', '30', { hash: hashOf(1_250, '12', '30') }), 'vouched');
  t.match(lost.gaps, [/^stream_resync from 1000: a change at 1250 left the streamed copy as it was/], 'the book of 1100 lies in the gap');

  // Nothing lost: the stream delivers 1100, then passes 1300 with that book still in force.
  const behind = setup();
  behind.proofs.checkRest(behind.token, summary(1_300, bids('12', '30'), asks), 1_300, 1_300);
  change(behind, 1_100, '0.47', '12', 'best');
  t.equal(behind.token.verifiedTs, 1_000, 'not yet: a change before 1300 may still come');
  t.ok(behind.token.restAhead?.agrees, 'the change REST showed was delivered: no stall bound runs');
  change(behind, 1_400, '0.47', '13', 'best');
  t.equal(behind.token.verifiedTs, 1_300, "proved at REST's instant once the stream passed it");
  t.equal(behind.token.restAhead, null);
  t.same(behind.gaps, []);

  // REST's instant reached, not passed: another message of that millisecond may still come. The
  // venue: 0.48 to 40 at 1050 (lost), then at 1100 0.47 to 12 and 0.48 back to 30, two messages.
  const sameMs = setup();
  sameMs.proofs.checkRest(sameMs.token, summary(1_100, bids('12', '30'), asks), 1_100, 1_100);
  change(sameMs, 1_100, '0.47', '12', { hash: hashOf(1_100, '12', '40') });
  t.equal(sameMs.token.verifiedTs, 1_000, "the copy at REST's instant is not proved before the stream passes it");
  t.equal(sameMs.token.doubt?.from, 1_000, 'its hash not reproduced: in doubt since the last proof');

  // A quiet token whose copy REST agrees with stays synced: an agreement owes nothing.
  const quiet = setup();
  for (let at = 2_000; at <= 20_000; at += 2_000) quiet.proofs.checkRest(quiet.token, summary(at, bids('10', '30'), asks), at, at);
  t.ok(quiet.token.synced);
  t.same(quiet.gaps, []);
});

t.test(
  'books in doubt until REST’s fields come: proved late when right, a gap when not, and one past those kept is never proved',
  async (t) => {
    // Synced before REST's fields came (a snapshot from the stream), so no hash can be checked yet.
    // The venue: 0.47 to 11 at 1050 (lost on the way to the copy when `lose`); 0.48 changes every 10 ms
    // from 1100; 0.47 to 12 at 1150, which makes the copy the venue's book again. Each change hashed by
    // the venue. Then REST's fields come.
    const run = (changes: number, lose: boolean) => {
      const s = setup();
      const asks: [string, string][] = [
        ['0.53', '10'],
        ['0.52', '25'],
      ];
      const fieldless = new LocalBook(market.condition_id!, 'up');
      fieldless.reset(
        summary(
          1_000,
          [
            ['0.47', lose ? '10' : '11'],
            ['0.48', '30'],
          ],
          asks,
        ),
        1_000,
      );
      fieldless.note({ tick_size: fields.tick_size, last_trade_price: fields.last_trade_price });
      Object.assign(s.token, { book: fieldless, history: [fieldless.state()] });
      const venue = { b47: '11', b48: '30' };
      for (let i = 0; i < changes; i++) {
        const ts = 1_100 + 10 * i;
        const change = i === 5 ? { price: '0.47', size: (venue.b47 = '12') } : { price: '0.48', size: (venue.b48 = String(31 + i)) };
        const hash = clobBookHash(
          summary(
            ts,
            [
              ['0.47', venue.b47],
              ['0.48', venue.b48],
            ],
            asks,
          ),
        );
        s.proofs.applyChecked(s.token, [{ asset_id: 'up', side: 'BUY', hash, ...change }], String(ts), ts);
      }
      t.equal(s.token.doubt?.from, 1_000, `${changes} books in doubt since the snapshot`);
      s.token.book.note({ min_order_size: fields.min_order_size, neg_risk: fields.neg_risk });
      s.proofs.recheck(s.token);
      return s;
    };
    const right = run(200, false);
    t.equal(right.token.doubt, null, 'nothing lost: every book reproduces once the fields come');
    t.same(right.gaps, [], 'and no gap');
    const wrong = run(200, true);
    t.equal(wrong.token.doubt?.books.length, 5, 'a change lost: the five books before 0.47 was set again stay in doubt');
    t.same(wrong.gaps, [], 'until the next proof (a gap then)');
    const many = run(4_200, true);
    t.equal(many.token.doubt, null, 'more books than a doubt keeps, the wrong ones among those let go');
    t.match(many.gaps, [/^stream_resync from 1000: 104 book\(s\) whose hash did not reproduce, too many to keep/], 'the span is a gap');
  },
);
