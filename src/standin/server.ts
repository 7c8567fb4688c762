// A local stand-in for both upstream venues, speaking their documented shapes
// (UPSTREAMS.md), so capture, tests, the demo and benchmarks run the real adapters over HTTP.
// Faults are injected here, never in the code under test.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Clock } from '../clock.js';
import { VENUE_COINS, type Venue, type Window } from '../config.js';
import { SECOND } from '../time.js';
import { GENESIS, POLY_CREATE_LEAD, Sim, type SimMarket, WALLET_LIST_LEAD, hash32 } from './sim.js';
import { mulberry32 } from './orderbook.js';
import { type ChannelQuirks, MarketChannel, clobSummary, conditionId } from './stream.js';
import type { StreamFaults } from './streamserver.js';
import { signatureRefusal } from './signed.js';
import { WalletTopics } from './walletstream.js';
import { type RtdsFaults, RtdsSocket } from './rtds.js';

export const WALLET_PREFIX = '/sapi/v1/w3w/wallet/prediction';

export interface Outage {
  /** Path prefix the outage applies to, for example `/book` or `${WALLET_PREFIX}/order-book`. */
  path: string;
  from: number;
  to: number;
  status?: number;
}

export interface Faults {
  errorRate: number;
  latencyMs: number;
  timeoutRate: number;
  rateLimitRate: number;
  retryAfterSec: number;
  truncateRate: number;
  malformedRate: number;
  /** Headers and half a body, then silence: a stream that stops sending. */
  stallRate: number;
  /** Sim-time windows in which matching paths answer 503. Deterministic, for gap tests. */
  outages: Outage[];
}

export const NO_FAULTS: Faults = {
  errorRate: 0,
  latencyMs: 0,
  timeoutRate: 0,
  rateLimitRate: 0,
  retryAfterSec: 1,
  truncateRate: 0,
  malformedRate: 0,
  stallRate: 0,
  outages: [],
};

export interface StandInOptions {
  clock: Clock;
  seed?: number;
  apiKey?: string;
  apiSecret?: string;
  /** Documented wallet budget: 12000 weight per minute, 200 per call. */
  walletWeightPerMinute?: number;
  /** The wall clock whose minutes the weight budget is counted in (the venue's: real time, whatever the simulated clock). */
  weightNow?: () => number;
  faults?: Partial<Faults>;
  /** Faults of the WebSocket market channel. */
  streamFaults?: Partial<StreamFaults>;
  /** Share of markets the venues resolve against the reference price (what the resolution check is for). */
  misresolveRate?: number;
  /** Faults of Polymarket's price socket (RTDS). */
  rtdsFaults?: Partial<RtdsFaults>;
  /** Keep the time of every REST book served (`stats.served`), for audits of what capture did with each; grows with the run. */
  keepServed?: boolean;
  /** What Polymarket's market channel does that a recorder must cope with (hash layout and skew, books after trades...). */
  channelQuirks?: Partial<ChannelQuirks>;
  coins?: Record<Venue, readonly string[]>;
}

export interface ServedStats {
  requests: number;
  faults: number;
  books: Record<Venue, number>;
  /** With `keepServed`: each token's books served over REST, by the clock time of serving. */
  served: Map<string, number[]> | null;
}

type Reply = { status: number; body: unknown; headers?: Record<string, string> };

class HttpReply extends Error {
  constructor(readonly reply: Reply) {
    super('reply');
  }
}

const walletError = (status: number, code: number, msg: string) => new HttpReply({ status, body: { code, msg } });

export class StandIn {
  readonly sim: Sim;
  readonly faults: Faults;
  /** Polymarket's WebSocket market channel, served on the same port. */
  readonly stream: MarketChannel;
  /** The wallet venue's orderbook topics, served on the same port. */
  readonly walletStream: WalletTopics;
  /** Polymarket's price socket (RTDS), served on the same port. */
  readonly rtds: RtdsSocket;
  readonly stats: ServedStats;
  private server: http.Server | null = null;
  private readonly sockets = new Set<import('node:net').Socket>();
  private weightWindow = { minute: 0, used: 0 };
  private random: () => number;

  constructor(private readonly options: StandInOptions) {
    this.stats = {
      requests: 0,
      faults: 0,
      books: { 'wallet-prediction': 0, polymarket: 0 },
      served: options.keepServed ? new Map() : null,
    };
    this.sim = new Sim(options.seed ?? 1, options.coins ?? VENUE_COINS);
    this.sim.misresolveRate = options.misresolveRate ?? 0;
    this.faults = { ...NO_FAULTS, ...options.faults };
    this.random = mulberry32(options.seed ?? 1);
    // Fault draws seeded through a hash: mulberry32 on small consecutive seeds starts with too few small values.
    this.stream = new MarketChannel(
      this.sim,
      options.clock,
      mulberry32(hash32(`${options.seed ?? 1}:market-channel`)),
      options.streamFaults,
      options.channelQuirks,
    );
    this.walletStream = new WalletTopics(
      this.sim,
      options.clock,
      mulberry32(hash32(`${options.seed ?? 1}:wallet-topics`)),
      options.streamFaults ?? {},
      { apiKey: options.apiKey ?? 'standin-key', apiSecret: options.apiSecret ?? 'standin-secret' },
    );
    this.rtds = new RtdsSocket(this.sim, options.clock, mulberry32(hash32(`${options.seed ?? 1}:rtds`)), options.rtdsFaults ?? {});
  }

  get url(): string {
    const address = this.server?.address() as AddressInfo | null;
    if (!address) throw new Error('stand-in not started');
    return `http://127.0.0.1:${address.port}`;
  }

  async start(port = 0, host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.on('upgrade', (req, socket, head) => {
      if (this.stream.upgrade(req, socket, head) || this.walletStream.upgrade(req, socket, head) || this.rtds.upgrade(req, socket, head))
        return;
      socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    });
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(port, host, resolve));
    return this.url;
  }

  async stop(): Promise<void> {
    this.stream.close();
    this.walletStream.close();
    this.rtds.close();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.stats.requests++;
    const url = new URL(req.url ?? '/', 'http://standin');
    let body = '';
    for await (const chunk of req) body += chunk;
    try {
      if (!url.pathname.startsWith('/_sim')) await this.injectFaults(url.pathname, res);
      if (res.writableEnded || res.headersSent) return;
      const reply = this.route(req.method ?? 'GET', url, req.headers, body);
      this.send(res, reply);
    } catch (err) {
      if (err instanceof HttpReply) this.send(res, err.reply);
      else this.send(res, { status: 500, body: { error: String(err) } });
    }
  }

  private send(res: http.ServerResponse, reply: Reply, mangle?: 'truncate' | 'malformed'): void {
    let text = JSON.stringify(reply.body);
    if (mangle === 'truncate') text = text.slice(0, Math.max(1, Math.floor(text.length / 2)));
    if (mangle === 'malformed') text = `<html>${text}`;
    res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
    res.end(text);
  }

  private async injectFaults(pathname: string, res: http.ServerResponse): Promise<void> {
    const f = this.faults;
    if (f.latencyMs > 0) await new Promise((r) => setTimeout(r, f.latencyMs));
    const now = this.options.clock.now();
    const outage = f.outages.find((o) => pathname.startsWith(o.path) && now >= o.from && now < o.to);
    const roll = () => this.random();
    const fault = (reply: Reply, mangle?: 'truncate' | 'malformed') => {
      this.stats.faults++;
      this.send(res, reply, mangle);
    };
    if (outage) return fault({ status: outage.status ?? 503, body: { error: 'service unavailable' } });
    if (roll() < f.errorRate) return fault({ status: 500, body: { error: 'internal error' } });
    if (roll() < f.rateLimitRate) {
      return fault({ status: 429, body: { code: -1003, msg: 'Too many requests' }, headers: { 'retry-after': String(f.retryAfterSec) } });
    }
    if (roll() < f.timeoutRate) {
      this.stats.faults++;
      return; // never answers; the client's timeout must fire
    }
    if (roll() < f.stallRate) {
      this.stats.faults++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"partial":');
      return;
    }
    if (roll() < f.truncateRate) return fault({ status: 200, body: { bids: [], asks: [] } }, 'truncate');
    if (roll() < f.malformedRate) return fault({ status: 200, body: {} }, 'malformed');
  }

  private route(method: string, url: URL, headers: http.IncomingHttpHeaders, body: string): Reply {
    const p = url.pathname;
    const q = url.searchParams;
    const now = this.options.clock.now();
    if (p === '/_sim/clock') return { status: 200, body: { now } };
    if (p === '/_sim/stats')
      return {
        status: 200,
        body: { ...this.stats, stream: this.stream.stats, walletStream: this.walletStream.stats, rtds: this.rtds.stats },
      };
    if (p === '/_sim/faults' && method === 'POST') {
      const { stream, channel, rtds, ...http } = JSON.parse(body || '{}');
      Object.assign(this.faults, http);
      Object.assign(this.stream.faults, stream ?? {});
      Object.assign(this.stream.quirks, channel ?? {});
      Object.assign(this.walletStream.faults, stream ?? {});
      Object.assign(this.rtds.faults, rtds ?? {});
      return { status: 200, body: { ...this.faults, stream: this.stream.faults } };
    }
    if (p.startsWith(WALLET_PREFIX)) {
      this.checkSigned(url, headers);
      const sub = p.slice(WALLET_PREFIX.length);
      if (sub === '/market/list') return { status: 200, body: this.walletList(q, now) };
      if (sub === '/market/detail') return { status: 200, body: this.walletDetail(q, now) };
      if (sub === '/order-book') return { status: 200, body: this.walletBook(q, now) };
      if (sub === '/order-book/last-trade-price') return { status: 200, body: this.walletLastTrade(q, now) };
      throw walletError(404, -1100, `Unknown path ${sub}`);
    }
    if (p === '/events' && method === 'GET') return { status: 200, body: this.polyEvents(q, now) };
    if (p === '/markets' && method === 'GET') return { status: 200, body: this.polyMarketsBySlug(q, now) };
    if (p.startsWith('/markets/') && method === 'GET') return { status: 200, body: this.polyMarketById(p.slice(9), now) };
    if (p === '/book' && method === 'GET') return this.clobBook(q.get('token_id') ?? '', now);
    if (p === '/books' && method === 'POST') return this.polyBooks(body, now);
    if (p === '/last-trade-price' && method === 'GET') return this.polyLastTrade(q, now);
    if (p === '/prices-history' && method === 'GET') return { status: 200, body: this.polyHistory(q, now) };
    return { status: 404, body: { error: 'not found' } };
  }

  // --- wallet venue -------------------------------------------------------------------

  private checkSigned(url: URL, headers: http.IncomingHttpHeaders): void {
    const refusal = signatureRefusal(url, headers, this.options.apiKey ?? 'standin-key', this.options.apiSecret ?? 'standin-secret');
    if (refusal) throw new HttpReply({ status: refusal.status, body: refusal.body });
    const now = (this.options.weightNow ?? Date.now)();
    const minute = Math.floor(now / 60_000);
    if (this.weightWindow.minute !== minute) this.weightWindow = { minute, used: 0 };
    this.weightWindow.used += 200;
    if (this.weightWindow.used > (this.options.walletWeightPerMinute ?? 12_000)) {
      throw new HttpReply({
        status: 429,
        body: { code: -1003, msg: 'Too much request weight used.' },
        headers: { 'retry-after': String(60 - (Math.floor(now / 1000) % 60)) },
      });
    }
  }

  private walletStatus(m: SimMarket, now: number): { status: string; trading: string } {
    if (now < m.start) return { status: 'REGISTERED', trading: 'OPEN' };
    if (now < m.resolvedAt) return { status: 'OPEN', trading: now < m.end ? 'OPEN' : 'CLOSED' };
    return { status: now < m.resolvedAt + 3600 * SECOND ? 'RESOLVED' : 'SETTLED', trading: 'CLOSED' };
  }

  private walletTopic(m: SimMarket, now: number) {
    const { status, trading } = this.walletStatus(m, now);
    const resolved = status === 'RESOLVED' || status === 'SETTLED';
    const winner = this.sim.winner(m);
    const outcome = (index: 0 | 1) => {
      const chance = resolved ? (winner === index ? 1 : 0) : this.sim.chance(m, index, now);
      // A resolved market's price is its payout; only a trading one has a book worth reading.
      const book = resolved ? null : this.sim.book(m, index, Math.min(now, m.end));
      const mid = book?.bids.length && book.asks.length ? (book.bids[0][0] + book.asks[0][0]) / 2 : chance;
      return {
        name: index === 0 ? 'Up' : 'Down',
        index,
        tokenId: m.tokenIds[index],
        chance: chance.toFixed(3),
        price: (resolved ? chance : mid).toFixed(2),
      };
    };
    const volume = this.sim.volume(m, now).toFixed(2);
    return {
      marketTopicId: this.sim.walletTopicId(m),
      vendor: 'PREDICT_FUN',
      chainId: '56',
      slug: this.sim.slug(m),
      title: `${m.coin.toUpperCase()} Up or Down ${m.window}`,
      question: `Will ${m.coin.toUpperCase()} price go UP?`,
      topicType: 'FLAT',
      chartType: 'CRYPTO_UP_DOWN',
      symbol: `${m.coin.toUpperCase()}USDT`,
      participantCount: this.sim.participants(m, now),
      collateral: 'USDT',
      feeRateBps: 200,
      slippageBps: 1200,
      tradeVolume: volume,
      liquidity: this.sim.liquidity(m).toFixed(2),
      publishedAt: m.start - WALLET_LIST_LEAD,
      startDate: m.start,
      endDate: m.end,
      status,
      markets: [
        {
          marketId: this.sim.walletMarketId(m),
          externalId: `ext_${m.code}`,
          title: 'UP',
          question: `Will ${m.coin.toUpperCase()} go UP?`,
          conditionId: `0x${m.code.toString(16).padStart(64, 'c')}`,
          status,
          tradingStatus: trading,
          tradeVolume: volume,
          liquidity: this.sim.liquidity(m).toFixed(2),
          decimalPrecision: 2,
          outcomes: [outcome(0), outcome(1)],
        },
      ],
    };
  }

  private walletList(q: URLSearchParams, now: number) {
    const total = this.sim.walletTopicCount(now);
    const offset = Number(q.get('offset') ?? 0);
    const limit = Number(q.get('limit') ?? 20);
    if (!Number.isInteger(offset) || offset < 0) throw walletError(400, -1100, 'Illegal characters found in parameter offset');
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw walletError(400, -1100, 'Illegal characters found in parameter limit');
    const asc = q.get('orderBy') === 'asc';
    const topics = [];
    for (let i = offset; i < Math.min(total, offset + limit); i++) {
      topics.push(this.walletTopic(this.sim.walletTopicAt(asc ? i : total - 1 - i), now));
    }
    return { marketTopics: topics, total, offset, limit, hasMore: offset + limit < total };
  }

  private walletMarket(id: number, now: number, kind: 'topic' | 'market'): SimMarket {
    const code = id - (kind === 'topic' ? 4_000_000 : 50_000_000);
    const m = Number.isInteger(code) && code >= 0 ? this.sim.byCode('wallet-prediction', code) : null;
    if (!m || m.start - WALLET_LIST_LEAD > now) throw walletError(400, -1102, `Unknown ${kind} id`);
    return m;
  }

  private walletDetail(q: URLSearchParams, now: number) {
    const m = this.walletMarket(Number(q.get('marketTopicId')), now, 'topic');
    const topic = this.walletTopic(m, now);
    return {
      ...topic,
      description: `Resolves Up if the ${m.coin.toUpperCase()}USDT reference at the end is at least the start.`,
      timeline: [
        { name: 'start', time: m.start },
        { name: 'end', time: m.end },
        { name: 'resolve', time: m.resolvedAt },
      ],
      variantData: {
        type: 'CRYPTO_UP_DOWN',
        startPrice: now >= m.start ? this.sim.reference(m.coin, m.start).toFixed(2) : null,
        endPrice: now >= m.end ? this.sim.reference(m.coin, m.end).toFixed(2) : null,
      },
    };
  }

  private servedAt(token: string, now: number): void {
    const times = this.stats.served?.get(token);
    if (times) times.push(now);
    else this.stats.served?.set(token, [now]);
  }

  private walletBook(q: URLSearchParams, now: number) {
    if (q.get('vendor') !== 'predict_fun' || !q.get('marketId') || !q.get('tokenId')) {
      throw walletError(400, -1102, "Mandatory parameter 'vendor', 'marketId' or 'tokenId' was not sent.");
    }
    const found = this.sim.byToken('wallet-prediction', q.get('tokenId')!);
    if (!found || this.sim.walletMarketId(found.market) !== Number(q.get('marketId'))) throw walletError(400, -1102, 'Unknown token');
    const { market, index } = found;
    const closed = now >= market.end;
    const book = closed ? { bids: [], asks: [], timestamp: market.end } : this.sim.book(market, index, now);
    this.stats.books['wallet-prediction']++;
    this.servedAt(q.get('tokenId')!, now);
    const level = ([price, size]: [number, number]) => ({ price: price.toFixed(2), size: size.toFixed(2) });
    return {
      outcome: index === 0 ? 'Up' : 'Down',
      tokenId: market.tokenIds[index],
      timestamp: book.timestamp,
      bids: book.bids.map(level),
      asks: book.asks.map(level),
    };
  }

  private walletLastTrade(q: URLSearchParams, now: number) {
    const m = this.walletMarket(Number(q.get('marketId')), now, 'market');
    const price = this.sim.lastTrade(m, 0, now);
    return { marketId: this.sim.walletMarketId(m), lastTradePrice: price === null ? null : price.toFixed(2) };
  }

  // --- Polymarket ----------------------------------------------------------------------

  private polyBySlug(slug: string | null, now: number): SimMarket | null {
    const m = /^([a-z0-9]+)-updown-(5m|15m)-(\d+)$/.exec(slug ?? '');
    if (!m) return null;
    const start = Number(m[3]) * SECOND;
    if (!this.sim.exists('polymarket', m[1], m[2] as Window, start)) return null;
    if (start - POLY_CREATE_LEAD > now) return null;
    return this.sim.market('polymarket', m[1], m[2] as Window, start);
  }

  private gammaMarket(m: SimMarket, now: number) {
    const resolved = now >= m.resolvedAt;
    const winner = this.sim.winner(m);
    const prices = resolved
      ? [winner === 0 ? '1' : '0', winner === 1 ? '1' : '0']
      : [this.sim.chance(m, 0, now).toFixed(3), this.sim.chance(m, 1, now).toFixed(3)];
    const book = resolved ? null : this.sim.book(m, 0, Math.min(now, m.end));
    return {
      id: this.sim.polymarketId(m),
      question: this.sim.polymarketQuestion(m),
      conditionId: conditionId(m),
      slug: this.sim.slug(m),
      questionID: `0x${m.code.toString(16).padStart(64, 'f')}`,
      startDate: new Date(m.start - POLY_CREATE_LEAD + 615_861).toISOString(),
      eventStartTime: new Date(m.start).toISOString().replace('.000', ''),
      endDate: new Date(m.end).toISOString().replace('.000', ''),
      outcomes: JSON.stringify(['Up', 'Down']),
      outcomePrices: JSON.stringify(prices),
      clobTokenIds: JSON.stringify(m.tokenIds),
      active: true,
      closed: now >= m.end,
      negRisk: false,
      orderPriceMinTickSize: this.sim.tickSize(m, now),
      orderMinSize: 5,
      volume: this.sim.volume(m, now).toFixed(6),
      liquidity: this.sim.liquidity(m).toFixed(4),
      lastTradePrice: this.sim.lastTrade(m, 0, now) ?? 0,
      bestBid: book?.bids[0]?.[0] ?? null,
      bestAsk: book?.asks[0]?.[0] ?? null,
      umaResolutionStatuses: JSON.stringify(resolved ? ['resolved'] : []),
      resolutionSource: `https://data.chain.link/streams/${m.coin}-usd`,
    };
  }

  private polyEvents(q: URLSearchParams, now: number) {
    const m = this.polyBySlug(q.get('slug'), now);
    if (!m) return [];
    const market = this.gammaMarket(m, now);
    return [
      {
        id: `9${market.id}`,
        slug: market.slug,
        title: market.question,
        startDate: market.startDate,
        endDate: market.endDate,
        markets: [market],
      },
    ];
  }

  private polyMarketsBySlug(q: URLSearchParams, now: number) {
    const m = this.polyBySlug(q.get('slug'), now);
    // Documented quirk: 5-minute markets are only found through /events.
    return m && m.window !== '5m' ? [this.gammaMarket(m, now)] : [];
  }

  private polyMarketById(id: string, now: number) {
    const code = Number(id) - 1_000_000;
    const m = Number.isInteger(code) && code >= 0 ? this.sim.byCode('polymarket', code) : null;
    if (!m || m.start - POLY_CREATE_LEAD > now) throw new HttpReply({ status: 404, body: { error: 'market not found' } });
    return this.gammaMarket(m, now);
  }

  private clobBook(tokenId: string, now: number): Reply {
    const found = this.sim.byToken('polymarket', tokenId);
    if (!found || found.market.start - POLY_CREATE_LEAD > now || now >= found.market.resolvedAt) {
      return { status: 404, body: { error: 'No orderbook exists for the requested token id' } };
    }
    const { market, index } = found;
    this.stats.books.polymarket++;
    this.servedAt(tokenId, now);
    return {
      status: 200,
      body: clobSummary(this.sim, market, index, Math.min(now, market.end), this.stream.quirks),
    };
  }

  private polyBooks(body: string, now: number): Reply {
    let items: unknown;
    try {
      items = JSON.parse(body);
    } catch {
      return { status: 400, body: { error: 'invalid json' } };
    }
    if (!Array.isArray(items) || items.length > 500) return { status: 400, body: { error: 'expected up to 500 {token_id}' } };
    const out = [];
    for (const item of items) {
      const r = this.clobBook(String((item as { token_id?: unknown })?.token_id ?? ''), now);
      if (r.status === 200) out.push(r.body);
    }
    return { status: 200, body: out };
  }

  private polyLastTrade(q: URLSearchParams, now: number): Reply {
    const found = this.sim.byToken('polymarket', q.get('token_id') ?? '');
    if (!found) return { status: 404, body: { error: 'No orderbook exists for the requested token id' } };
    const price = this.sim.lastTrade(found.market, found.index, now);
    return { status: 200, body: { price: (price ?? 0.5).toFixed(2), side: this.sim.rand('side', now) < 0.5 ? 'BUY' : 'SELL' } };
  }

  private polyHistory(q: URLSearchParams, now: number) {
    const found = this.sim.byToken('polymarket', q.get('market') ?? '');
    if (!found) return { history: [] };
    const { market, index } = found;
    const fidelity = Math.max(1, Number(q.get('fidelity') ?? 1));
    // Documented quirk: resolved markets have no history below 12-hour fidelity.
    if (now >= market.resolvedAt && fidelity < 720) return { history: [] };
    const from = Math.max(Number(q.get('startTs') ?? 0) * SECOND, market.start, GENESIS);
    const to = Math.min(Number(q.get('endTs') ?? now / SECOND) * SECOND, now, market.end);
    const step = fidelity * 60 * SECOND;
    const history = [];
    for (let t = Math.ceil(from / step) * step; t <= to; t += step) {
      history.push({ t: t / SECOND, p: this.sim.chance(market, index, t) });
    }
    return { history };
  }
}
