// The stand-in's Polymarket market channel (UPSTREAMS.md C1): subscribe by `assets_ids` (a `book`
// snapshot per asset only when the frame asks for `initial_dump`), then `price_change` (new
// aggregate size per level, 0 removes it, the book hash and best levels per entry, one message per
// market and instant), `last_trade_price`, `tick_size_change` (when a price passes 0.96 or 0.04) and
// PING/PONG text heartbeats. Hashes are the venue's 10-field SHA-1. No sequence numbers, as the
// venue sends none. Faults are the failures users report of the real feed: drops, reorders,
// duplicates, silent freezes, disconnects and stale snapshots on resubscribe; and what the venue
// does that a recorder must cope with (`ChannelQuirks`). A connection that asked for the custom
// feature events is sent each subscribed market's `market_resolved` when it resolves, and a
// `new_market` for every market created while it is open.
import type { WebSocket } from 'ws';
import { SECOND, WINDOW_MS } from '../time.js';
import { type ClobBookExtras, type ClobLevel, type HashLayout, clobBookHash } from '../venues/polymarket/book.js';
import { TICKS, bestAsk, bestBid, ladders } from './orderbook.js';
import type { Clock } from '../clock.js';
import { FINE_TICK, POLY_CREATE_LEAD, type Sim, type SimMarket, TICK } from './sim.js';
import { type Outgoing, type StreamClient, type StreamFaults, StreamServer } from './streamserver.js';

export const MARKET_CHANNEL_PATH = '/ws/market';

interface Subscription {
  market: SimMarket;
  index: 0 | 1;
  /** Changes up to this clock time have been sent (or lost to a fault). */
  cursor: number;
  /** The book as this connection's changes have left it, for the hashes and best levels. */
  sizes: Float64Array;
  /** The venue's last trade text as its hashes see it, and the second it was read for. */
  trade: { second: number; text: string } | null;
  /** The best bid and ask last announced by `best_bid_ask`. */
  best: string;
}

/** What the real venue does that a recorder must cope with (UPSTREAMS.md C1); none by default. */
export interface ChannelQuirks {
  /** Where the venue's hashed JSON puts `"hash":""`. */
  hashLayout: HashLayout;
  /** The hashed timestamp is up to this many ms off the message's (public recorders see a few). */
  hashSkewMs: number;
  /** Hashes include a trade this many ms before its `last_trade_price` is sent. */
  tradeLeadMs: number;
  /** A `book` of the token after every trade, as the venue sends. */
  bookAfterTrade: boolean;
  /** Share of `price_change` entries sent without `size` (the venue's Rust client treats it as optional). */
  incompleteRate: number;
  /** Share of snapshots never sent although `initial_dump` asked for them. */
  snapshotLossRate: number;
  /** A `best_bid_ask` whenever a token's best levels change, to connections that asked for the custom feature events. */
  bestBidAsk: boolean;
  /**
   * `book` messages write prices without the leading zero (".48"), as the venue's documented
   * example does, while REST and `price_change` write "0.48"; the hash stays over the venue's one
   * formatting of its book, REST's. Which text the venue hashes is not documented: this is the
   * reading in which REST's hash and the channel's agree.
   */
  bareDecimals: boolean;
}

export const NO_QUIRKS: ChannelQuirks = {
  hashLayout: 'hash-fourth',
  hashSkewMs: 0,
  tradeLeadMs: 0,
  bookAfterTrade: false,
  incompleteRate: 0,
  snapshotLossRate: 0,
  bestBidAsk: false,
  bareDecimals: false,
};

/** A trade price as the venue writes it, on REST and the market channel alike (no trade yet: the venue's 0.5). */
export const tradeText = (price: number | null): string => (price ?? 0.5).toFixed(3);

/** The venue's hashed fields beside the levels, for a token at `t`. */
export function venueExtras(sim: Sim, m: SimMarket, index: 0 | 1, t: number, quirks: ChannelQuirks = NO_QUIRKS): Required<ClobBookExtras> {
  return {
    min_order_size: '5',
    tick_size: String(sim.tickSize(m, t)),
    neg_risk: false,
    last_trade_price: tradeText(sim.lastTrade(m, index, t + quirks.tradeLeadMs)),
  };
}

interface Client extends StreamClient {
  assets: Map<string, Subscription>;
  /** Tokens this connection was sent a book of: the first of each carries `last_trade_price`. */
  booked: Set<string>;
  /** Whether a frame asked for the custom feature events (`custom_feature_enabled`). */
  custom: boolean;
  /** Markets (by code) whose `market_resolved` this connection was sent. */
  resolved: Set<number>;
  /** Clock time up to which created markets were announced by `new_market` (custom feature events). */
  announced: number;
}

export function conditionId(m: SimMarket): string {
  return `0x${m.code.toString(16).padStart(64, 'a')}`;
}

const level = (price: number, size: number): ClobLevel => ({ price: String(price), size: size.toFixed(2) });

/** The market channel's `last_trade_price` of the trade the model has for `market`'s token at second `s` (price `price`). */
export function tradeMessage(sim: Sim, market: SimMarket, index: 0 | 1, s: number, price: number) {
  return {
    event_type: 'last_trade_price',
    asset_id: market.tokenIds[index],
    market: conditionId(market),
    price: tradeText(price),
    side: sim.rand(market.code, 'trade-side', s) < 0.5 ? 'BUY' : 'SELL',
    size: (5 + Math.floor(sim.rand(market.code, 'trade-size', index, s) * 500)).toFixed(2),
    fee_rate_bps: '0',
    timestamp: String(s * SECOND),
    transaction_hash: `0x${sim.rand(market.code, 'tx', index, s).toString(16).slice(2).padEnd(64, '0')}`,
  };
}

/** A token's book as the CLOB's REST `/book` answers it (bids ascending, asks descending: best levels last), hashed. */
export function clobSummary(sim: Sim, m: SimMarket, index: 0 | 1, t: number, quirks: ChannelQuirks = NO_QUIRKS) {
  const state = sim.bookState(m, index, t);
  return summaryOf(m, index, Math.min(state.ts, t), state.sizes, venueExtras(sim, m, index, t, quirks), quirks);
}

/** The summary in REST's field order, its hash over the venue's layout at the (possibly skewed) hashed time. */
function summaryOf(
  m: SimMarket,
  index: 0 | 1,
  timestamp: number,
  sizes: Float64Array,
  extras: Required<ClobBookExtras>,
  quirks: ChannelQuirks,
  hashedAt = timestamp,
) {
  const { bids, asks } = ladders({ ts: timestamp, seq: 0, sizes });
  const body = {
    market: conditionId(m),
    asset_id: m.tokenIds[index],
    timestamp: String(timestamp),
    bids: bids.map(([p, s]) => level(p, s)).reverse(),
    asks: asks.map(([p, s]) => level(p, s)).reverse(),
    ...extras,
  };
  const hash = clobBookHash({ ...body, timestamp: String(hashedAt) }, quirks.hashLayout);
  return { market: body.market, asset_id: body.asset_id, timestamp: body.timestamp, hash, bids: body.bids, asks: body.asks, ...extras };
}

export class MarketChannel extends StreamServer<Client> {
  subscriptions = 0;
  /** Snapshots not sent: asked without `initial_dump`, or lost to `snapshotLossRate`. */
  withheldSnapshots = 0;
  /** `best_bid_ask` custom feature events made. */
  bestBidAsks = 0;
  /** `new_market` custom feature events made. */
  newMarkets = 0;
  /** Clock time each token was first subscribed: a recorder owes its book from a stall bound after. */
  readonly subscribedAt = new Map<string, number>();
  readonly quirks: ChannelQuirks;

  constructor(sim: Sim, clock: Clock, random: () => number, faults: Partial<StreamFaults> = {}, quirks: Partial<ChannelQuirks> = {}) {
    super(sim, clock, random, faults, MARKET_CHANNEL_PATH);
    this.quirks = { ...NO_QUIRKS, ...quirks };
  }

  protected accept(socket: WebSocket): Client {
    const client: Client = {
      socket,
      assets: new Map(),
      held: null,
      booked: new Set(),
      custom: false,
      resolved: new Set(),
      announced: this.clock.now(),
    };
    socket.on('message', (data, isBinary) => {
      const text = isBinary ? '' : data.toString();
      // Heartbeats are answered even while data is frozen: that is what makes a freeze silent.
      if (text === 'PING') return socket.send('PONG');
      let request: { assets_ids?: unknown; type?: unknown; operation?: unknown; initial_dump?: unknown; custom_feature_enabled?: unknown };
      try {
        request = JSON.parse(text);
      } catch {
        return socket.send('INVALID OPERATION');
      }
      if (!request || !Array.isArray(request.assets_ids)) return socket.send('INVALID OPERATION');
      if (request.custom_feature_enabled === true) client.custom = true;
      if (request.operation === 'unsubscribe') {
        for (const id of request.assets_ids) client.assets.delete(String(id));
        return;
      }
      // Without `initial_dump` the venue often sends no snapshot, for later tokens above all: here, never.
      this.subscribe(client, request.assets_ids.map(String), request.initial_dump === true);
    });
    return client;
  }

  private subscribe(client: Client, ids: string[], dump: boolean): void {
    const now = this.clock.now();
    const snapshotAt = now - this.faults.staleSnapshotMs;
    const books = [];
    for (const id of ids) {
      const found = this.sim.byToken('polymarket', id);
      if (!found || now >= found.market.resolvedAt || client.assets.has(id)) continue;
      const { market, index } = found;
      const at = Math.min(snapshotAt, market.end - 1);
      const state = this.sim.bookState(market, index, at);
      // The hashes that follow are of the venue's true book, whatever snapshot this connection was sent.
      const current = this.sim.bookState(market, index, Math.min(now, market.end - 1));
      client.assets.set(id, { market, index, cursor: Math.max(now, at), sizes: current.sizes.slice(), trade: null, best: '' });
      this.subscriptions++;
      if (!this.subscribedAt.has(id)) this.subscribedAt.set(id, now);
      if (!dump || this.random() < this.quirks.snapshotLossRate) {
        this.withheldSnapshots++;
        continue;
      }
      const summary = summaryOf(
        market,
        index,
        Math.min(state.ts, at),
        state.sizes,
        venueExtras(this.sim, market, index, at, this.quirks),
        this.quirks,
      );
      books.push(this.bookMessage(client, summary));
    }
    // The venue answers a subscription with one array of snapshots.
    if (books.length) client.socket.send(JSON.stringify(books));
  }

  /**
   * A `book` as the channel sends it (as public recorders observe it): the REST summary's levels,
   * hash and tick, `last_trade_price` only on a token's first on the connection.
   */
  private bookMessage(client: Client, s: ReturnType<typeof summaryOf>) {
    const { min_order_size: _m, neg_risk: _n, last_trade_price, ...book } = s;
    const first = !client.booked.has(s.asset_id);
    client.booked.add(s.asset_id);
    const bare = (levels: ClobLevel[]) => levels.map((l) => ({ ...l, price: l.price.replace(/^0\./, '.') }));
    const sides = this.quirks.bareDecimals ? { bids: bare(book.bids), asks: bare(book.asks) } : {};
    return { event_type: 'book', ...book, ...sides, ...(first ? { last_trade_price } : {}) };
  }

  /** The venue's hashed fields for a subscription at `t`: the last trade read once a second as the pump moves on. */
  private extras(sub: Subscription, t: number): Required<ClobBookExtras> {
    const second = Math.floor((t + this.quirks.tradeLeadMs) / SECOND);
    if (sub.trade?.second !== second) sub.trade = { second, text: tradeText(this.sim.lastTrade(sub.market, sub.index, second * SECOND)) };
    return { min_order_size: '5', tick_size: String(this.sim.tickSize(sub.market, t)), neg_risk: false, last_trade_price: sub.trade.text };
  }

  /**
   * A `new_market` for each market created since the connection's last announcement, whatever it
   * subscribed; the fields are those public clients of the venue parse (no verbatim example is published).
   */
  private announce(client: Client, now: number, events: { t: number; rank: number; body: Record<string, unknown> }[]): void {
    const from = client.announced;
    client.announced = now;
    for (const window of ['5m', '15m'] as const) {
      const step = WINDOW_MS[window];
      for (let start = (Math.floor((from + POLY_CREATE_LEAD) / step) + 1) * step; start - POLY_CREATE_LEAD <= now; start += step) {
        for (const coin of this.sim.coins.polymarket) {
          if (!this.sim.exists('polymarket', coin, window, start)) continue;
          const m = this.sim.market('polymarket', coin, window, start);
          this.newMarkets++;
          const question = this.sim.polymarketQuestion(m);
          events.push({
            t: start - POLY_CREATE_LEAD,
            rank: 0,
            body: {
              event_type: 'new_market',
              id: this.sim.polymarketId(m),
              question,
              market: conditionId(m),
              slug: this.sim.slug(m),
              description: question,
              assets_ids: m.tokenIds,
              outcomes: ['Up', 'Down'],
              timestamp: String(start - POLY_CREATE_LEAD),
              tags: ['crypto'],
              condition_id: conditionId(m),
              active: true,
              clob_token_ids: m.tokenIds,
              order_price_min_tick_size: String(TICK),
            },
          });
        }
      }
    }
  }

  /** Every change since each subscription's cursor, grouped as the venue groups them: one message per market and instant. */
  protected pending(client: Client, now: number): Outgoing[] {
    const q = this.quirks;
    const messages = new Map<string, { t: number; body: Record<string, unknown>; changes: Record<string, string>[] }>();
    // Trades, tick changes and books after trades: messages of one asset that carry no change entries.
    // At one instant a trade or tick comes before the changes it hashes into, a book after them.
    const assetEvents: { t: number; rank: number; body: Record<string, unknown> }[] = [];
    if (client.custom) this.announce(client, now, assetEvents);
    for (const [id, sub] of client.assets) {
      const { market, index } = sub;
      if (client.custom && now >= market.resolvedAt && !client.resolved.has(market.code)) {
        client.resolved.add(market.code);
        const winner = this.sim.winner(market);
        assetEvents.push({
          t: market.resolvedAt,
          rank: 3,
          body: {
            event_type: 'market_resolved',
            id: this.sim.polymarketId(market),
            market: conditionId(market),
            assets_ids: market.tokenIds,
            winning_asset_id: market.tokenIds[winner],
            winning_outcome: winner === 0 ? 'Up' : 'Down',
            timestamp: String(market.resolvedAt),
            tags: ['crypto'],
          },
        });
      }
      if (sub.cursor >= market.end) continue;
      const to = Math.min(now, market.end - 1);
      const changes = this.sim.bookChanges(market, index, sub.cursor, to);
      for (let i = 0; i < changes.length; i++) {
        const c = changes[i];
        sub.sizes[(c.side === 'BUY' ? 0 : TICKS) + c.tick] = c.size;
        // One entry per change; the hash and best levels are of the book after the instant's last change.
        const last = changes[i + 1]?.t !== c.t;
        const key = `${market.code}:${c.t}`;
        let m = messages.get(key);
        if (!m) {
          m = { t: c.t, body: { event_type: 'price_change', market: conditionId(market), timestamp: String(c.t) }, changes: [] };
          messages.set(key, m);
        }
        const entry: Record<string, string> = { asset_id: id, price: String(c.tick / 100), size: c.size.toFixed(2), side: c.side };
        if (q.incompleteRate > 0 && this.random() < q.incompleteRate) delete entry.size;
        m.changes.push(entry);
        if (last) {
          const skew = q.hashSkewMs ? Math.round((this.sim.rand(market.code, 'skew', c.t) * 2 - 1) * q.hashSkewMs) : 0;
          const summary = summaryOf(market, index, c.t, sub.sizes, this.extras(sub, c.t), q, c.t + skew);
          const bid = bestBid(sub.sizes);
          const ask = bestAsk(sub.sizes);
          const bidText = bid === null ? '0' : String(bid / 100);
          const askText = ask === null ? '1' : String(ask / 100);
          for (const e of m.changes) {
            if (e.asset_id !== id || e.hash) continue;
            e.hash = summary.hash;
            e.best_bid = bidText;
            e.best_ask = askText;
          }
          if (q.bestBidAsk && client.custom && sub.best !== `${bidText}/${askText}`) {
            sub.best = `${bidText}/${askText}`;
            this.bestBidAsks++;
            const spread = ((ask ?? 100) - (bid ?? 0)) / 100;
            assetEvents.push({
              t: c.t,
              rank: 1,
              body: {
                event_type: 'best_bid_ask',
                market: conditionId(market),
                asset_id: id,
                best_bid: bidText,
                best_ask: askText,
                spread: spread.toFixed(2),
                timestamp: String(c.t),
              },
            });
          }
        }
      }
      for (let s = Math.floor(sub.cursor / SECOND) + 1; s * SECOND <= to; s++) {
        const price = this.sim.tradeAt(market, index, s);
        if (price === null) continue;
        assetEvents.push({ t: s * SECOND, rank: 0, body: tradeMessage(this.sim, market, index, s, price) });
        if (q.bookAfterTrade) {
          const state = this.sim.bookState(market, index, s * SECOND);
          const summary = summaryOf(
            market,
            index,
            Math.min(state.ts, s * SECOND),
            state.sizes,
            venueExtras(this.sim, market, index, s * SECOND, q),
            q,
          );
          assetEvents.push({ t: s * SECOND, rank: 2, body: this.bookMessage(client, summary) });
        }
      }
      const tickAt = this.sim.tickChangeAt(market);
      if (tickAt !== null && tickAt > sub.cursor && tickAt <= to) {
        assetEvents.push({
          t: tickAt,
          rank: 0,
          body: {
            event_type: 'tick_size_change',
            asset_id: id,
            market: conditionId(market),
            old_tick_size: String(TICK),
            new_tick_size: String(FINE_TICK),
            timestamp: String(tickAt),
          },
        });
      }
      sub.cursor = to;
    }
    const out: { t: number; rank: number; body: Record<string, unknown>; changes: Record<string, string>[] }[] = [
      ...[...messages.values()].map((m) => ({ t: m.t, rank: 1, body: { ...m.body, price_changes: m.changes }, changes: m.changes })),
      ...assetEvents.map((x) => ({ ...x, changes: [] })),
    ].sort((a, b) => a.t - b.t || a.rank - b.rank);
    return out.map(({ t, body, changes }) => ({
      text: JSON.stringify(body),
      changes: changes.length,
      keys: changes.map((c) => `${c.asset_id}@${t}`),
    }));
  }
}
