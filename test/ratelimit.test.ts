// Keys' limits across API processes: the primary's RateBank holds each key's bucket and workers
// lease tokens from it. Leases travel over an in-memory channel here; test/cluster.test.ts runs
// the real processes.
import t from 'tap';
import { LeasedLimiter, RateBank, type RateChannel, type RateMessage, RateLimiter } from '../src/edge/ratelimit.js';

/** A worker's line to `bank`, answered a tick later as IPC would be; counts the messages sent. */
function line(bank: RateBank): RateChannel & { sent: RateMessage[] } {
  let handler: (m: unknown) => void = () => undefined;
  const sent: RateMessage[] = [];
  return {
    sent,
    send: (m) => {
      sent.push(m);
      setImmediate(() => {
        const answer = bank.handle(m);
        if (answer) handler(answer);
      });
    },
    listen: (h) => {
      handler = h;
    },
  };
}

t.test('two workers leasing from one bank never pass the key’s limit together', async (t) => {
  const bank = new RateBank();
  const lines = [line(bank), line(bank)];
  const workers = lines.map((l) => new LeasedLimiter(l));
  const began = Date.now();
  let allowed = 0;
  for (let i = 0; i < 100; i++) if ((await workers[i % 2].take('k1', 100)).allowed) allowed++;
  t.equal(allowed, 100, "the burst of a second's worth is all served");
  const leases = lines.flatMap((l) => l.sent).filter((m) => m.type === 'rate-lease');
  t.ok(leases.length <= 25, `tokens come five at a time: ${leases.length} messages for 100 requests`);
  for (let i = 0; i < 200; i++) if ((await workers[i % 2].take('k1', 100)).allowed) allowed++;
  const elapsed = Date.now() - began;
  t.ok(allowed <= 100 + Math.ceil((elapsed / 1000) * 100) + 1, `then no more than the refill over ${elapsed} ms (${allowed} in all)`);

  const denied = await workers[0].take('k1', 100);
  if (!denied.allowed) {
    t.equal(denied.remaining, 0);
    t.ok(denied.reset >= 1, 'a refusal says when to retry');
  }
  for (const w of workers) w.close();
});

t.test('tokens a worker leased and did not spend go back to the bank', async (t) => {
  const bank = new RateBank();
  const worker = new LeasedLimiter(line(bank));
  const first = await worker.take('k2', 100);
  t.ok(first.allowed);
  t.equal(first.remaining, 99, 'remaining counts the bank’s tokens and the ones held here');
  const held = worker.take('k2', 100);
  t.notOk(held instanceof Promise, 'a leased token is spent without a message');
  worker.close();
  await new Promise((r) => setImmediate(r));
  const grant = bank.handle({ type: 'rate-lease', id: 1, key: 'k2', perSecond: 100, want: 1000 });
  t.ok(grant && grant.type === 'rate-grant' && grant.granted >= 98, 'the three unspent tokens came back (98 of 100 in the bucket)');
  t.equal(bank.handle({ type: 'hello' }), null, 'anything else is not answered');
  t.equal(bank.handle('text'), null);
});

t.test('one process alone keeps its own buckets', async (t) => {
  const limiter = new RateLimiter();
  const now = 1_000_000;
  const decisions = [0, 1, 2].map(() => limiter.take('k', 2, now));
  t.same(
    decisions.map((d) => [d.allowed, d.remaining, d.reset]),
    [
      [true, 1, 0],
      [true, 0, 1],
      [false, 0, 1],
    ],
  );
  t.ok(limiter.take('k', 2, now + 500).allowed, 'half a second refills one of two');
});
