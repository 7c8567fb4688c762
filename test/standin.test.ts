// The stand-in speaks the upstream contracts (signatures, rate limits, quirks), and the HTTP
// client copes with its faults.
import t from 'tap';
import { createClock } from '../src/clock.js';
import { StandIn, WALLET_PREFIX } from '../src/standin/server.js';
import { HttpClient, UpstreamError } from '../src/venues/http.js';
import { signedQuery } from '../src/venues/wallet/signing.js';

const clock = createClock(Date.parse('2026-07-26T13:40:00Z'));
// The weight budget counts in one wall-clock minute that never ends here: a run straddling a minute's
// end (under load, once) would start a fresh budget before the third call.
const standin = new StandIn({ clock, apiKey: 'k', apiSecret: 's', walletWeightPerMinute: 200 * 3, weightNow: () => 0 });
const url = await standin.start(0);
t.teardown(() => standin.stop());
/** tap's matcher types want an Error; the fields of an UpstreamError are what is checked. */
const fails = (fields: Record<string, unknown>) => fields as unknown as Error;
// A deadline far past any answer on a starved machine (500 ms timed out a signed call beside
// stress-ng); the one test of the deadline sets its own.
const client = (over: Partial<{ timeoutMs: number; maxRetries: number }> = {}) =>
  new HttpClient('test', { timeoutMs: 30_000, maxRetries: 0, concurrency: 4, requestsPerSecond: 1000, ...over }, 5);

t.test('wallet calls must be signed with the operator key', async (t) => {
  const get = (secret: string, key: string, ts = Date.now()) =>
    client().json({
      url: () => `${url}${WALLET_PREFIX}/market/list?${signedQuery(secret, { limit: 5 }, ts)}`,
      headers: { 'X-MBX-APIKEY': key },
    });
  const ok = (await get('s', 'k')) as { marketTopics: unknown[]; total: number };
  t.equal(ok.marketTopics.length, 5);
  await t.rejects(get('wrong', 'k'), fails({ kind: 'http_4xx', body: { code: -1022 } }));
  await t.rejects(get('s', 'other'), fails({ kind: 'http_4xx', body: { code: -2015 } }));
  await t.rejects(get('s', 'k', Date.now() - 60_000), fails({ kind: 'http_4xx', body: { code: -1021 } }));
  // Signed calls spend weight: the budget of 3 calls a minute runs out into 429 + Retry-After.
  await get('s', 'k');
  await get('s', 'k');
  await t.rejects(get('s', 'k'), fails({ kind: 'rate_limited', status: 429 }));
});

t.test('Polymarket quirks: 5-minute slugs only through /events, resolved tokens have no book', async (t) => {
  const slug = `btc-updown-5m-${Date.parse('2026-07-26T13:40:00Z') / 1000}`;
  t.same(await client().json({ url: () => `${url}/markets?slug=${slug}` }), []);
  const events = await client().json<{ markets: { clobTokenIds: string }[] }[]>({ url: () => `${url}/events?slug=${slug}` });
  t.equal(events.length, 1);
  const old = standin.sim.market('polymarket', 'btc', '5m', Date.parse('2026-07-26T10:00:00Z'));
  await t.rejects(client().json({ url: () => `${url}/book?token_id=${old.tokenIds[0]}` }), fails({ kind: 'http_4xx', status: 404 }));
});

t.test('the client retries 5xx and 429 (honouring Retry-After) and gives up with the kind', async (t) => {
  Object.assign(standin.faults, { rateLimitRate: 1, retryAfterSec: 0 });
  const c = client({ maxRetries: 2 });
  await t.rejects(c.json({ url: () => `${url}/events?slug=x` }), fails({ kind: 'rate_limited' }));
  t.equal(c.stats.retries, 2);
  Object.assign(standin.faults, { rateLimitRate: 0, stallRate: 1 });
  // The stand-in never finishes a stalled body: a timeout is the deadline's doing.
  await t.rejects(
    client({ timeoutMs: 200 }).json({ url: () => `${url}/events?slug=x` }),
    fails({ kind: 'timeout' }),
    'a stalled body hits the deadline',
  );
  Object.assign(standin.faults, { stallRate: 0, truncateRate: 1 });
  await t.rejects(client().json({ url: () => `${url}/events?slug=x` }), fails({ kind: 'malformed' }));
  Object.assign(standin.faults, { truncateRate: 0, errorRate: 1 });
  await t.rejects(client().json({ url: () => `${url}/events?slug=x` }), UpstreamError);
  Object.assign(standin.faults, { errorRate: 0 });
  await t.rejects(client().json({ url: () => 'http://127.0.0.1:1/nothing' }), fails({ kind: 'network' }));
});
