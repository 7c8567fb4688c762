// Polymarket (UPSTREAMS.md section B): Gamma for the catalogue (deterministic slugs, JSON
// strings inside JSON), the CLOB for books (best levels last) and price history.
import type { Clock } from '../../clock.js';
import type { Config, Window } from '../../config.js';
import type { Book, Market } from '../../records.js';
import { WINDOW_MS, floorTo } from '../../time.js';
import { type MarketPoll, type Quote, type VenueAdapter, asError, decimal, decimalOrNull, ladders, statusByTime } from '../adapter.js';
import type { ClobBookSummary, ClobLevel } from './book.js';
import { HttpClient, UpstreamError } from '../http.js';

interface GammaMarket {
  id: string;
  question?: string;
  conditionId?: string;
  slug: string;
  questionID?: string;
  startDate?: string;
  eventStartTime?: string;
  endDate: string;
  outcomes: string;
  outcomePrices: string;
  clobTokenIds: string;
  closed?: boolean;
  negRisk?: boolean;
  orderPriceMinTickSize?: number;
  volume?: string;
  liquidity?: string;
}

interface GammaEvent {
  id: string;
  markets: GammaMarket[];
}

interface ClobBook {
  market?: string;
  asset_id: string;
  hash?: string;
  timestamp?: string;
  bids: unknown;
  asks: unknown;
  min_order_size?: unknown;
  tick_size?: unknown;
  neg_risk?: unknown;
  last_trade_price?: unknown;
}

const SLUG_RE = /^([a-z0-9]+)-updown-(5m|15m)-(\d+)$/;
/** Polymarket shows the midpoint unless the spread is wider than this, then the last trade. */
const DISPLAY_SPREAD = 0.1;

function jsonArray(text: string, field: string): string[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UpstreamError('malformed', `${field} is not a JSON string array`);
  }
  if (!Array.isArray(value)) throw new UpstreamError('malformed', `${field} is not a JSON string array`);
  return value.map(String);
}

export class PolymarketAdapter implements VenueAdapter {
  readonly venue = 'polymarket' as const;
  readonly historyKept = 'the venue returned none for this range (resolved markets have none below 12-hour fidelity)';
  readonly http: HttpClient;
  /** Gamma markets of the last discovery, for chance quotes between discoveries. */
  private readonly slugs = new Map<string, string>();

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
  ) {
    this.http = new HttpClient('polymarket', config.polymarket);
  }

  slugFor(coin: string, window: Window, start: number): string {
    return `${coin}-updown-${window}-${Math.floor(start / 1000)}`;
  }

  private async event(slug: string): Promise<{ event: GammaEvent; market: GammaMarket } | null> {
    const events = await this.http.json<GammaEvent[]>({
      url: () => `${this.config.polymarket.gammaUrl}/events?slug=${encodeURIComponent(slug)}`,
    });
    if (!Array.isArray(events)) throw new UpstreamError('malformed', 'events: expected an array');
    const event = events[0];
    const market = event?.markets?.find((m) => m.slug === slug) ?? event?.markets?.[0];
    return event && market ? { event, market } : null;
  }

  async discover(now: number): Promise<Market[]> {
    const slugs: string[] = [];
    for (const coin of this.config.capture.coins.polymarket) {
      for (const window of this.config.capture.windows) {
        const current = floorTo(now, WINDOW_MS[window]);
        for (const start of [current - WINDOW_MS[window], current, current + WINDOW_MS[window]]) {
          slugs.push(this.slugFor(coin, window, start));
        }
      }
    }
    const found = await Promise.all(slugs.map((s) => this.event(s)));
    const markets: Market[] = [];
    for (const f of found) {
      if (!f) continue;
      const record = this.normalize(f.market, f.event.id, now);
      this.slugs.set(record.market_id, f.market.slug);
      markets.push(record);
    }
    return markets;
  }

  normalize(g: GammaMarket, eventId: string | null, now: number): Market {
    const slug = SLUG_RE.exec(g.slug);
    if (!slug) throw new UpstreamError('malformed', `unexpected slug ${g.slug}`);
    const labels = jsonArray(g.outcomes, 'outcomes');
    const tokens = jsonArray(g.clobTokenIds, 'clobTokenIds');
    const prices = jsonArray(g.outcomePrices, 'outcomePrices');
    const start = Date.parse(g.eventStartTime ?? '') || Number(slug[3]) * 1000;
    const end = Date.parse(g.endDate);
    const winner = g.closed ? prices.findIndex((p) => decimal(p, 'outcomePrices') === 1) : -1;
    const decided = winner >= 0 && prices.every((p, i) => i === winner || decimal(p, 'outcomePrices') === 0);
    return {
      market_id: String(g.id),
      topic_id: eventId,
      venue: this.venue,
      slug: g.slug,
      title: g.question ?? null,
      coin: slug[1],
      window: slug[2] as Window,
      start_time: start,
      end_time: end,
      created_time: g.startDate ? Date.parse(g.startDate) : null,
      resolved_time: null,
      status: decided ? 'resolved' : statusByTime(now, start, end),
      resolution: decided ? 'resolved' : 'pending',
      winning_outcome_index: decided ? winner : null,
      condition_id: g.conditionId ?? null,
      question_id: g.questionID ?? null,
      oracle: null,
      outcomes: labels.map((label, index) => ({ index, label, token_id: tokens[index] })),
      volume: decimalOrNull(g.volume, 'volume'),
      liquidity: decimalOrNull(g.liquidity, 'liquidity'),
      participant_count: null,
      chain_id: 137,
      chain_name: 'polygon',
      exchange_address: null,
      exchange_kind: g.negRisk ? 'neg_risk_ctf' : 'ctf',
      collateral: 'USDC',
      fee_rate_bps: null,
      tick_size: g.orderPriceMinTickSize ?? null,
      reference_price_start: null,
      reference_price_end: null,
    };
  }

  async poll(markets: Market[], _now: number): Promise<Map<string, MarketPoll>> {
    const tokens = markets.flatMap((m) => m.outcomes.map((o) => o.token_id));
    const out = new Map<string, MarketPoll>();
    // POST /books takes up to 500 tokens a call.
    const batches: Promise<ClobBook[] | UpstreamError>[] = [];
    for (let i = 0; i < tokens.length; i += 500) {
      const body = JSON.stringify(tokens.slice(i, i + 500).map((token_id) => ({ token_id })));
      batches.push(
        this.http.json<ClobBook[]>({ method: 'POST', url: () => `${this.config.polymarket.clobUrl}/books`, body }).catch(asError),
      );
    }
    const chances = Promise.all(markets.map((m) => this.event(this.slugs.get(m.market_id) ?? m.slug ?? '').catch(asError)));
    const answered = await Promise.all(batches);
    const recvTs = this.clock.now();
    const byToken = new Map<string, ClobBook>();
    let batchError: UpstreamError | null = null;
    for (const a of answered) {
      if (a instanceof UpstreamError) batchError = a;
      else if (Array.isArray(a)) for (const b of a) byToken.set(String(b.asset_id), b);
      else batchError = new UpstreamError('malformed', 'books: expected an array');
    }
    const gamma = await chances;
    markets.forEach((m, i) => {
      let books: Book[] | UpstreamError;
      try {
        books = m.outcomes.map((o) => {
          const b = byToken.get(o.token_id);
          if (!b) throw batchError ?? new UpstreamError('http_4xx', `no orderbook for token ${o.token_id}`);
          return {
            market_id: m.market_id,
            token_id: o.token_id,
            outcome_index: o.index,
            outcome: o.label,
            exchange_ts: b.timestamp ? decimal(b.timestamp, 'timestamp') : null,
            ...ladders(b.bids, b.asks, `book ${o.token_id}`),
            verified_by: 'snapshot',
          };
        });
      } catch (err) {
        books = asError(err);
      }
      const summaries = books instanceof UpstreamError ? undefined : m.outcomes.map((o) => summaryOf(byToken.get(o.token_id)!));
      out.set(m.market_id, { books, summaries, quotes: this.quotes(m, books, gamma[i], byToken), recvTs });
    });
    return out;
  }

  async bookSummaries(tokenIds: string[]): Promise<{ summaries: (ClobBookSummary & { hash?: string })[]; recvTs: number }> {
    const body = JSON.stringify(tokenIds.slice(0, 500).map((token_id) => ({ token_id })));
    const answer = await this.http.json<ClobBook[]>({ method: 'POST', url: () => `${this.config.polymarket.clobUrl}/books`, body });
    const recvTs = this.clock.now();
    if (!Array.isArray(answer)) throw new UpstreamError('malformed', 'books: expected an array');
    // `ladders` throws on levels that are not decimals: a malformed book is never a snapshot.
    for (const b of answer) ladders(b.bids, b.asks, `book ${b.asset_id}`);
    return { summaries: answer.map(summaryOf), recvTs };
  }

  private quotes(
    m: Market,
    books: Book[] | UpstreamError,
    g: Awaited<ReturnType<PolymarketAdapter['event']>> | UpstreamError,
    byToken: Map<string, ClobBook>,
  ): Quote[] | UpstreamError {
    try {
      const chances = g instanceof UpstreamError || !g ? null : jsonArray(g.market.outcomePrices, 'outcomePrices');
      return m.outcomes.map((o) => {
        const raw = byToken.get(o.token_id);
        const lastTrade = decimalOrNull(raw?.last_trade_price, 'last_trade_price');
        const book = books instanceof UpstreamError ? null : (books.find((b) => b.outcome_index === o.index) ?? null);
        return {
          outcome_index: o.index,
          chance: chances ? decimalOrNull(chances[o.index], 'outcomePrices') : null,
          price: book ? displayedPrice(book, lastTrade) : null,
          last_trade: lastTrade,
        };
      });
    } catch (err) {
      return asError(err);
    }
  }

  async *catalogue(coin: string, window: Window, from: number, to: number, now: number): AsyncIterable<Market> {
    const step = WINDOW_MS[window];
    for (let start = Math.ceil(from / step) * step; start < to; start += step) {
      const found = await this.event(this.slugFor(coin, window, start));
      if (found) yield this.normalize(found.market, found.event.id, now);
    }
  }

  async priceHistory(market: Market): Promise<{ ts: number; outcome_index: number; price: number }[]> {
    const out: { ts: number; outcome_index: number; price: number }[] = [];
    for (const o of market.outcomes) {
      const q = new URLSearchParams({
        market: o.token_id,
        startTs: String(Math.floor(market.start_time / 1000)),
        endTs: String(Math.ceil(market.end_time / 1000)),
        fidelity: '1',
      });
      const body = await this.http.json<{ history?: { t: number; p: unknown }[] }>({
        url: () => `${this.config.polymarket.clobUrl}/prices-history?${q}`,
      });
      for (const point of body.history ?? []) {
        out.push({ ts: point.t * 1000, outcome_index: o.index, price: decimal(point.p, 'history.p') });
      }
    }
    return out;
  }
}

/** The CLOB's summary as it was sent (levels were validated by `ladders`), for checking a streamed copy. */
function summaryOf(b: ClobBook): ClobBookSummary & { hash?: string } {
  return {
    market: String(b.market ?? ''),
    asset_id: String(b.asset_id),
    timestamp: String(b.timestamp ?? ''),
    bids: b.bids as ClobLevel[],
    asks: b.asks as ClobLevel[],
    ...(typeof b.hash === 'string' ? { hash: b.hash } : {}),
    // The hashed fields beside the levels, kept exactly as sent (a recorder hashes them as they are).
    ...(typeof b.min_order_size === 'string' ? { min_order_size: b.min_order_size } : {}),
    ...(typeof b.tick_size === 'string' ? { tick_size: b.tick_size } : {}),
    ...(typeof b.neg_risk === 'boolean' ? { neg_risk: b.neg_risk } : {}),
    ...(typeof b.last_trade_price === 'string' ? { last_trade_price: b.last_trade_price } : {}),
  };
}

/** Polymarket's displayed price: the midpoint, or the last trade when the spread is wide. */
export function displayedPrice(book: Pick<Book, 'bid_prices' | 'ask_prices'>, lastTrade: number | null): number | null {
  const bid = book.bid_prices[0];
  const ask = book.ask_prices[0];
  if (bid === undefined || ask === undefined) return lastTrade;
  if (ask - bid > DISPLAY_SPREAD + 1e-9) return lastTrade;
  return Math.round(((bid + ask) / 2) * 1e6) / 1e6;
}
