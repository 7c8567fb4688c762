import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { createClock } from '../src/clock.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { decimal, ladders } from '../src/venues/adapter.js';
import { UpstreamError } from '../src/venues/http.js';
import { PolymarketAdapter, displayedPrice } from '../src/venues/polymarket/rest.js';
import { signQuery, signedQuery } from '../src/venues/wallet/signing.js';
import { WalletAdapter } from '../src/venues/wallet/rest.js';
import { backoffMs, parseTime } from '../src/time.js';

const config = loadConfig({ DATA_DIR: '/tmp/unused' });
const clock = createClock();

t.test('wallet signing matches the public HMAC-SHA256 example', async (t) => {
  const secret = 'NhqPtmdSJYdKjVHjA7PZj4Mge3R5YNiP1e3UZjInClVN65XAbvqqM6A7H5fATj0j';
  const query = 'symbol=LTCBTC&side=BUY&type=LIMIT&timeInForce=GTC&quantity=1&price=0.1&recvWindow=5000&timestamp=1499827319559';
  t.equal(signQuery(secret, query), 'c8db56825ae71d6d79447849e617115f4a920fa2acdcab2b053c4b2838bd6b71');
  const signed = signedQuery(
    secret,
    { symbol: 'LTCBTC', side: 'BUY', type: 'LIMIT', timeInForce: 'GTC', quantity: 1, price: 0.1 },
    1499827319559,
  );
  t.equal(signed, `${query}&signature=c8db56825ae71d6d79447849e617115f4a920fa2acdcab2b053c4b2838bd6b71`);
});

t.test('ladders come out best first whatever the upstream order', async (t) => {
  // Polymarket: bids ascending, asks descending, best levels last.
  const poly = ladders(
    [
      { price: '0.48', size: '10' },
      { price: '0.49', size: '20.5' },
      { price: '0.50', size: '30' },
    ],
    [
      { price: '0.53', size: '1' },
      { price: '0.52', size: '2' },
      { price: '0.51', size: '3' },
    ],
    'test',
  );
  // How the venue wrote them: every price with two decimals; sizes each in their shortest form.
  t.same(poly, {
    bid_prices: [0.5, 0.49, 0.48],
    bid_sizes: [30, 20.5, 10],
    ask_prices: [0.51, 0.52, 0.53],
    ask_sizes: [3, 2, 1],
    price_decimals: 2,
    size_decimals: null,
    level_texts: null,
  });
  t.same(ladders([], [], 'empty'), {
    bid_prices: [],
    bid_sizes: [],
    ask_prices: [],
    ask_sizes: [],
    price_decimals: null,
    size_decimals: null,
    level_texts: null,
  });
  // Texts no code says ("10.0" beside "20.55") are kept whole, best first.
  t.same(
    ladders(
      [
        { price: '0.5', size: '10.0' },
        { price: '0.4', size: '20.55' },
      ],
      [],
      'mixed',
    ),
    {
      bid_prices: [0.5, 0.4],
      bid_sizes: [10, 20.55],
      ask_prices: [],
      ask_sizes: [],
      price_decimals: null,
      size_decimals: null,
      level_texts: '[["0.5","0.4"],["10.0","20.55"],[],[]]',
    },
  );
  const oneSided = ladders([{ price: '0.01', size: '14225.02' }], [], 'one-sided');
  t.same(oneSided.bid_prices, [0.01]);
  t.same(oneSided.ask_prices, []);
  t.throws(() => ladders([{ price: 'abc', size: '1' }], [], 'bad'), UpstreamError);
  t.throws(() => ladders({}, [], 'bad'), UpstreamError);
});

t.test('decimal strings parse without drift and reject garbage', async (t) => {
  t.equal(decimal('158234.56', 'v'), 158234.56);
  t.equal(decimal('0.1', 'v') + decimal('0.2', 'v') > 0.3, true, 'parsing is exact; sums are the caller’s business');
  t.equal(decimal('0.52', 'v'), 0.52);
  t.equal(decimal(0.58, 'v'), 0.58);
  for (const bad of ['', '1,5', '0x10', 'NaN', null, {}, '1.2.3']) t.throws(() => decimal(bad, 'v'), UpstreamError, String(bad));
});

t.test('wallet topic normalizes with every identifier and label kept', async (t) => {
  const wallet = new WalletAdapter(config, clock);
  const topic = {
    marketTopicId: 4229564,
    vendor: 'PREDICT_FUN',
    chainId: '56',
    slug: 'btc-updown-15m-1785072600',
    title: 'BTC Up or Down 15m',
    symbol: 'BTCUSDT',
    participantCount: 3420,
    collateral: 'USDT',
    feeRateBps: 200,
    tradeVolume: '158234.56',
    liquidity: '45000.00',
    publishedAt: 1785067200000,
    startDate: 1785072600000,
    endDate: 1785073500000,
    status: 'RESOLVED',
    markets: [
      {
        marketId: 5567895,
        conditionId: '0xabc123',
        status: 'RESOLVED',
        decimalPrecision: 2,
        outcomes: [
          { name: 'Down', price: '0', chance: '0', index: 1, tokenId: '445566' },
          { name: 'Up', price: '1', chance: '1', index: 0, tokenId: '112233' },
        ],
      },
    ],
    variantData: { startPrice: '67890.12', endPrice: '67912.40' },
  };
  const m = wallet.normalize(topic, 1785074000000)!;
  t.match(m, {
    market_id: '5567895',
    topic_id: '4229564',
    venue: 'wallet-prediction',
    coin: 'btc',
    window: '15m',
    status: 'resolved',
    resolution: 'resolved',
    winning_outcome_index: 0,
    condition_id: '0xabc123',
    volume: 158234.56,
    liquidity: 45000,
    participant_count: 3420,
    chain_id: 56,
    chain_name: 'bnb',
    collateral: 'USDT',
    fee_rate_bps: 200,
    tick_size: 0.01,
    reference_price_start: 67890.12,
    reference_price_end: 67912.4,
  });
  t.same(m.outcomes, [
    { index: 0, label: 'Up', token_id: '112233' },
    { index: 1, label: 'Down', token_id: '445566' },
  ]);
  const open = wallet.normalize({ ...topic, status: 'OPEN', markets: [{ ...topic.markets[0], status: 'OPEN' }] }, 1785073000000)!;
  t.equal(open.status, 'open');
  t.equal(open.winning_outcome_index, null);
  t.equal(
    wallet.normalize({ ...topic, status: 'REGISTERED', markets: [{ ...topic.markets[0], status: 'REGISTERED' }] }, 1785070000000)!.status,
    'upcoming',
  );
  t.equal(wallet.normalize({ ...topic, endDate: topic.startDate + 3_600_000 }, 0), null, 'hourly markets are not ours');
});

t.test('gamma market normalizes JSON-in-JSON fields and resolution', async (t) => {
  const poly = new PolymarketAdapter(config, clock);
  const g = {
    id: '1066851',
    question: 'Bitcoin Up or Down - December 31, 12:00PM-12:15PM ET',
    conditionId: '0x2e6a',
    slug: 'btc-updown-15m-1767200400',
    questionID: '0xf69e',
    startDate: '2025-12-30T17:10:15.861305Z',
    eventStartTime: '2025-12-31T17:00:00Z',
    endDate: '2025-12-31T17:15:00Z',
    outcomes: '["Up", "Down"]',
    outcomePrices: '["0.585", "0.415"]',
    clobTokenIds: '["8851", "1018"]',
    active: true,
    closed: false,
    negRisk: false,
    orderPriceMinTickSize: 0.01,
    volume: '92509.470055',
    liquidity: '20579.7452',
  };
  const open = poly.normalize(g, '9001', Date.parse('2025-12-31T17:05:00Z'));
  t.match(open, {
    market_id: '1066851',
    topic_id: '9001',
    coin: 'btc',
    window: '15m',
    status: 'open',
    resolution: 'pending',
    start_time: Date.parse('2025-12-31T17:00:00Z'),
    end_time: Date.parse('2025-12-31T17:15:00Z'),
    created_time: Date.parse('2025-12-30T17:10:15.861Z'),
    volume: 92509.470055,
    tick_size: 0.01,
    chain_id: 137,
  });
  t.same(open.outcomes, [
    { index: 0, label: 'Up', token_id: '8851' },
    { index: 1, label: 'Down', token_id: '1018' },
  ]);
  const resolved = poly.normalize({ ...g, closed: true, outcomePrices: '["0", "1"]' }, null, Date.parse('2026-01-01T00:00:00Z'));
  t.match(resolved, { status: 'resolved', resolution: 'resolved', winning_outcome_index: 1 });
  const closed = poly.normalize({ ...g, closed: true }, null, Date.parse('2025-12-31T17:16:00Z'));
  t.match(closed, { status: 'closed', winning_outcome_index: null });
  t.throws(() => poly.normalize({ ...g, outcomes: 'not json' }, null, 0), UpstreamError);
});

t.test('displayed price: midpoint, or last trade when the spread is wider than 0.10', async (t) => {
  t.equal(displayedPrice({ bid_prices: [0.5], ask_prices: [0.52] }, 0.4), 0.51);
  t.equal(displayedPrice({ bid_prices: [0.3], ask_prices: [0.5] }, 0.44), 0.44);
  t.equal(displayedPrice({ bid_prices: [], ask_prices: [0.5] }, 0.47), 0.47);
});

t.test("the market channel defaults to the venue's own host when the CLOB is the real one", async (t) => {
  t.equal(
    loadConfig({ POLYMARKET_CLOB_URL: 'https://clob.polymarket.com' }).polymarket.wsUrl,
    'wss://ws-subscriptions-clob.polymarket.com/ws/market',
  );
  t.equal(
    loadConfig({ POLYMARKET_CLOB_URL: 'http://127.0.0.1:8090' }).polymarket.wsUrl,
    'ws://127.0.0.1:8090/ws/market',
    'a stand-in serves it beside REST',
  );
  t.equal(
    loadConfig({ POLYMARKET_CLOB_URL: 'https://clob.polymarket.com', POLYMARKET_WS_URL: 'wss://elsewhere.example/ws/market' }).polymarket
      .wsUrl,
    'wss://elsewhere.example/ws/market',
    'and the setting wins',
  );
});

t.test('config is validated and frozen', async (t) => {
  t.throws(() => loadConfig({ PORT: 'abc' }), ConfigError);
  t.throws(() => loadConfig({ CAPTURE_WINDOWS: '7m' }), /expected some of: 5m, 15m/);
  t.throws(() => loadConfig({ WALLET_BASE_URL: 'not a url' }), ConfigError);
  t.throws(
    () => loadConfig({ DUCKDB_MEMORY_LIMIT: 'lots' }),
    /DUCKDB_MEMORY_LIMIT="lots" is not a size/,
    'a bad memory limit is refused, not replaced',
  );
  t.throws(() => loadConfig({ LOG_FORMAT: 'xml' }), /LOG_FORMAT="xml"; expected one of: json, pretty, auto/);
  t.throws(() => loadConfig({ FILL_SPEED: '1' }), /FILL_SPEED/, 'a fill must run faster than real time');
  t.throws(() => loadConfig({ CORS_ORIGINS: 'https://app.example.com/path' }), /expected an origin/);
  t.throws(() => loadConfig({ COPIES_SHARE: '-1' }), /COPIES_SHARE="-1" is not a number in 0..1000/);
  t.throws(() => loadConfig({ COPIES_SHARE: 'lots' }), /COPIES_SHARE/);
  t.equal(loadConfig({}).api.replay.copiesShare, 1, 'copies at most the Parquet by default');
  t.equal(loadConfig({ COPIES_SHARE: 'unbounded' }).api.replay.copiesShare, Infinity);
  t.equal(loadConfig({}).api.incrementalMarking, false, 'API workers without incremental marking by default');
  t.equal(loadConfig({ API_INCREMENTAL_MARKING: 'on' }).api.incrementalMarking, true);
  t.throws(() => loadConfig({ API_INCREMENTAL_MARKING: 'yes' }), /API_INCREMENTAL_MARKING="yes"; expected one of: on, off/);
  const jobs = loadConfig({
    STANDIN_PORT: '9001',
    STANDIN_SEED: '7',
    FILL_HOURS: '3',
    PMH_API_KEY: 'pmh_x',
    PORT: '9000',
    DUCKDB_MEMORY_LIMIT: '512MiB',
  });
  t.same(
    { standin: jobs.standin, fill: jobs.fill, apiUrl: jobs.client.apiUrl, memory: jobs.api.duckdbMemoryLimit },
    {
      standin: { port: 9001, seed: 7, walletWeightPerMinute: 12_000 },
      fill: { hours: 3, speed: 240, pollMs: 5000 },
      apiUrl: 'http://127.0.0.1:9000',
      memory: '512MiB',
    },
    'every job setting comes from the one config module',
  );
  const c = loadConfig({ CAPTURE_WINDOWS: '15m', CLOCK_START: '2026-07-26T00:00:00Z' });
  t.same(c.capture.windows, ['15m']);
  t.equal(c.clock.startMs, Date.parse('2026-07-26T00:00:00Z'));
  t.ok(Object.isFrozen(c.capture));
});

t.test('times parse as UTC when no zone is given', async (t) => {
  t.equal(parseTime('2026-05-05'), Date.parse('2026-05-05T00:00:00Z'));
  t.equal(parseTime('2026-05-05T10:00:00'), Date.parse('2026-05-05T10:00:00Z'));
  t.equal(parseTime('2026-05-05T10:00:00+02:00'), Date.parse('2026-05-05T08:00:00Z'));
  t.equal(parseTime('1785072600000'), 1785072600000);
  t.equal(parseTime('yesterday'), null);
  t.equal(parseTime('2028-02-29'), Date.parse('2028-02-29T00:00:00Z'), 'a leap day');
  for (const impossible of [
    '2026-02-29',
    '2026-02-30T00:00:00Z',
    '2026-04-31',
    '2026-13-01',
    '2026-00-10',
    '2026-05-00',
    '2026-05-05T24:00:00Z',
  ])
    t.equal(parseTime(impossible), null, `${impossible} does not exist: refused, not rolled over`);
});

t.test('production code depends on neither the stand-in nor, in capture, on any one venue', async (t) => {
  const root = fileURLToPath(new URL('../src/', import.meta.url));
  const imports = async (dir: string) => {
    const found: { file: string; from: string }[] = [];
    for (const entry of await readdir(path.join(root, dir), { recursive: true })) {
      if (!entry.endsWith('.ts')) continue;
      const text = await readFile(path.join(root, dir, entry), 'utf8');
      for (const m of text.matchAll(/from '([^']+)'/g))
        found.push({ file: path.join(dir, entry), from: path.join(dir, path.dirname(entry), m[1]) });
    }
    return found;
  };
  for (const dir of ['capture', 'venues', 'api', 'lake']) {
    const onStandin = (await imports(dir)).filter((i) => i.from.startsWith('standin/'));
    t.same(onStandin, [], `nothing under src/${dir}/ imports the stand-in`);
  }
  const venueSpecific = (await imports('capture')).filter((i) => /^venues\/(polymarket|wallet)\//.test(i.from));
  t.same(venueSpecific, [], "capture/ reaches into no venue's room: venues/index.ts picks the adapter and the recorder");
  const named = [];
  for (const entry of await readdir(path.join(root, 'capture'))) {
    const text = await readFile(path.join(root, 'capture', entry), 'utf8');
    if (/'(polymarket|wallet-prediction)'/.test(text)) named.push(entry);
  }
  t.same(named, [], 'nor names a venue');
});

t.test('one backoff for every retry: the minimum doubled each attempt, capped', async (t) => {
  t.same(
    [0, 1, 2, 5, 6, 100].map((a) => backoffMs(a, 250, 10_000)),
    [250, 500, 1000, 8000, 10_000, 10_000],
  );
  t.equal(backoffMs(-1, 250, 10_000), 250, 'no attempt before the first');
});
