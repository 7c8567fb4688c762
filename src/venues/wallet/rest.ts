// The wallet application's prediction API (UPSTREAMS.md section A): signed GETs, offset
// pagination, per-token books, one last-trade price per market.
import type { Clock } from '../../clock.js';
import type { Config, Window } from '../../config.js';
import type { Book, Market } from '../../records.js';
import {
  type MarketPoll,
  type Quote,
  type VenueAdapter,
  asError,
  decimal,
  decimalOrNull,
  ladders,
  statusByTime,
  windowOf,
} from '../adapter.js';
import { HttpClient, UpstreamError } from '../http.js';
import { signedQuery } from './signing.js';

interface WalletOutcome {
  name: string;
  index: number;
  tokenId: string | number;
  price?: string;
  chance?: string;
}

interface WalletTopic {
  marketTopicId: number;
  chainId?: string;
  slug?: string;
  title?: string;
  symbol?: string;
  participantCount?: number;
  collateral?: string;
  feeRateBps?: number;
  tradeVolume?: string;
  liquidity?: string;
  publishedAt?: number;
  startDate: number;
  endDate: number;
  status: string;
  markets: {
    marketId: number;
    conditionId?: string;
    status?: string;
    decimalPrecision?: number;
    outcomes: WalletOutcome[];
  }[];
  variantData?: { startPrice?: string | null; endPrice?: string | null };
}

interface WalletList {
  marketTopics: WalletTopic[];
  total: number;
  hasMore: boolean;
}

const PAGE = 100;
const CHAINS: Record<string, string> = { '56': 'bnb', '97': 'bnb-testnet' };

export class WalletAdapter implements VenueAdapter {
  readonly venue = 'wallet-prediction' as const;
  readonly historyKept = 'the wallet API keeps none';
  readonly http: HttpClient;
  private readonly resolvedDetail = new Map<string, WalletTopic>();
  /** The list page discovery fetched, reused by a poll at the same clock time (one call, not two). */
  private listed: { now: number; page: Promise<WalletList> } | null = null;

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
  ) {
    this.http = new HttpClient('wallet-prediction', config.wallet);
  }

  private get<T>(path: string, params: Record<string, string | number>): Promise<T> {
    const { baseUrl, apiKey, apiSecret } = this.config.wallet;
    return this.http.json<T>({
      url: () => `${baseUrl}/${path}?${signedQuery(apiSecret, params)}`,
      headers: { 'X-MBX-APIKEY': apiKey },
    });
  }

  private newestPage(now: number): Promise<WalletList> {
    if (this.listed?.now !== now) {
      this.listed = { now, page: this.get<WalletList>('market/list', { offset: 0, limit: PAGE, sortBy: 'startDate', orderBy: 'desc' }) };
    }
    return this.listed.page;
  }

  async discover(now: number): Promise<Market[]> {
    const page = await this.newestPage(now);
    const markets: Market[] = [];
    for (const topic of page.marketTopics ?? []) {
      let record = this.normalize(topic, now);
      if (!record || !this.wanted(record)) continue;
      if (record.status === 'resolved') record = await this.withDetail(record, topic, now);
      markets.push(record);
    }
    return markets;
  }

  /** A resolved topic's detail carries the reference prices; fetched once per market. */
  private async withDetail(record: Market, topic: WalletTopic, now: number): Promise<Market> {
    let detail = this.resolvedDetail.get(record.market_id);
    if (!detail) {
      detail = await this.get<WalletTopic>('market/detail', { marketTopicId: topic.marketTopicId });
      this.resolvedDetail.set(record.market_id, detail);
    }
    return this.normalize(detail, now) ?? record;
  }

  private wanted(m: Market): boolean {
    return this.config.capture.coins[this.venue].includes(m.coin) && this.config.capture.windows.includes(m.window);
  }

  normalize(topic: WalletTopic, now: number): Market | null {
    const market = topic.markets?.[0];
    const window = windowOf(topic.endDate - topic.startDate);
    const coin = topic.symbol?.replace(/USDT$|USD$/, '').toLowerCase();
    if (!market || !window || !coin) return null;
    const upstream = (market.status ?? topic.status ?? '').toUpperCase();
    const resolved = upstream === 'RESOLVED' || upstream === 'SETTLED';
    const cancelled = upstream === 'CANCELLED' || upstream === 'CANCELED' || upstream === 'VOIDED';
    const outcomes = [...market.outcomes]
      .sort((a, b) => a.index - b.index)
      .map((o) => ({ index: o.index, label: o.name, token_id: String(o.tokenId) }));
    const winner = resolved ? market.outcomes.find((o) => o.price !== undefined && decimal(o.price, 'outcome.price') === 1) : undefined;
    return {
      market_id: String(market.marketId),
      topic_id: String(topic.marketTopicId),
      venue: this.venue,
      slug: topic.slug ?? null,
      title: topic.title ?? null,
      coin,
      window,
      start_time: topic.startDate,
      end_time: topic.endDate,
      created_time: topic.publishedAt ?? null,
      resolved_time: null,
      status: resolved ? 'resolved' : cancelled ? 'cancelled' : statusByTime(now, topic.startDate, topic.endDate),
      resolution: resolved ? 'resolved' : cancelled ? 'invalid' : 'pending',
      winning_outcome_index: winner ? winner.index : null,
      condition_id: market.conditionId ?? null,
      question_id: null,
      oracle: null,
      outcomes,
      volume: decimalOrNull(topic.tradeVolume, 'tradeVolume'),
      liquidity: decimalOrNull(topic.liquidity, 'liquidity'),
      participant_count: topic.participantCount ?? null,
      chain_id: topic.chainId ? Number(topic.chainId) : null,
      chain_name: topic.chainId ? (CHAINS[topic.chainId] ?? null) : null,
      exchange_address: null,
      exchange_kind: null,
      collateral: topic.collateral ?? null,
      fee_rate_bps: topic.feeRateBps ?? null,
      tick_size: market.decimalPrecision !== undefined ? 10 ** -market.decimalPrecision : null,
      reference_price_start: decimalOrNull(topic.variantData?.startPrice, 'variantData.startPrice'),
      reference_price_end: decimalOrNull(topic.variantData?.endPrice, 'variantData.endPrice'),
    };
  }

  async poll(markets: Market[], now: number): Promise<Map<string, MarketPoll>> {
    const wanted = new Set(markets.map((m) => m.market_id));
    const listing = this.newestPage(now)
      .then((page) => {
        const quotes = new Map<string, Quote[]>();
        for (const topic of page.marketTopics ?? []) {
          const market = topic.markets?.[0];
          if (!market || !wanted.has(String(market.marketId))) continue;
          quotes.set(
            String(market.marketId),
            market.outcomes.map((o) => ({
              outcome_index: o.index,
              chance: decimalOrNull(o.chance, 'outcome.chance'),
              price: decimalOrNull(o.price, 'outcome.price'),
              last_trade: null,
            })),
          );
        }
        return quotes;
      })
      .catch(asError);
    const results = await Promise.all(
      markets.map(async (m) => {
        const [books, lastTrade] = await Promise.all([
          Promise.all(m.outcomes.map((o) => this.book(m, o.index, o.token_id, o.label))).catch(asError),
          this.get<{ lastTradePrice: string | null }>('order-book/last-trade-price', { marketId: m.market_id })
            .then((r) => decimalOrNull(r.lastTradePrice, 'lastTradePrice'))
            .catch(asError),
        ]);
        return { m, books, lastTrade, recvTs: this.clock.now() };
      }),
    );
    const quotes = await listing;
    const out = new Map<string, MarketPoll>();
    for (const { m, books, lastTrade, recvTs } of results) {
      let q: Quote[] | UpstreamError =
        quotes instanceof UpstreamError
          ? quotes
          : (quotes.get(m.market_id) ?? new UpstreamError('malformed', `market ${m.market_id} missing from market/list`));
      if (!(q instanceof UpstreamError)) {
        // The venue reports one last-trade price per market, for its first outcome.
        q = q.map((x) => ({ ...x, last_trade: x.outcome_index === 0 && !(lastTrade instanceof UpstreamError) ? lastTrade : null }));
      }
      out.set(m.market_id, { books, quotes: q, recvTs });
    }
    return out;
  }

  private async book(m: Market, index: number, tokenId: string, label: string): Promise<Book> {
    const body = await this.get<{ tokenId: string; timestamp?: number; bids: unknown; asks: unknown }>('order-book', {
      vendor: 'predict_fun',
      marketId: m.market_id,
      tokenId,
    });
    if (String(body.tokenId) !== tokenId) throw new UpstreamError('malformed', `order-book answered token ${body.tokenId} for ${tokenId}`);
    return {
      market_id: m.market_id,
      token_id: tokenId,
      outcome_index: index,
      outcome: label,
      exchange_ts: typeof body.timestamp === 'number' ? body.timestamp : null,
      ...ladders(body.bids, body.asks, `order-book ${tokenId}`),
      verified_by: 'snapshot',
    };
  }

  /**
   * The list is sorted by start time and offset-paginated, so the first topic of a range is
   * found by binary search over offsets, then the range is read forward page by page.
   */
  async *catalogue(coin: string, window: Window, from: number, to: number, now: number): AsyncIterable<Market> {
    const params = { sortBy: 'startDate', orderBy: 'asc' };
    const first = await this.get<WalletList>('market/list', { ...params, offset: 0, limit: 1 });
    let lo = 0;
    let hi = first.total;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const page = await this.get<WalletList>('market/list', { ...params, offset: mid, limit: 1 });
      if ((page.marketTopics[0]?.startDate ?? Infinity) < from) lo = mid + 1;
      else hi = mid;
    }
    for (let offset = lo; ; offset += PAGE) {
      const page = await this.get<WalletList>('market/list', { ...params, offset, limit: PAGE });
      for (const topic of page.marketTopics) {
        if (topic.startDate >= to) return;
        const record = this.normalize(topic, now);
        if (!record || record.coin !== coin || record.window !== window) continue;
        const detail = await this.get<WalletTopic>('market/detail', { marketTopicId: topic.marketTopicId });
        yield this.normalize(detail, now) ?? record;
      }
      if (!page.hasMore || page.marketTopics.length === 0) return;
    }
  }

  async priceHistory(): Promise<{ ts: number; outcome_index: number; price: number }[]> {
    return []; // the wallet API documents no price history
  }
}
