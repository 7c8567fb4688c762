// The stand-in's Polymarket market channel (UPSTREAMS.md B): subscribe by `assets_ids`, a `book`
// snapshot per asset, then `price_change` (new aggregate size per level, 0 removes it, a book
// hash per asset), `last_trade_price`, `tick_size_change` (when a price passes 0.96 or 0.04) and
// PING/PONG text heartbeats. No sequence numbers, as
// the venue sends none. Faults are the failures users report of the real feed: drops, reorders,
// duplicates, silent freezes, disconnects and stale snapshots on resubscribe.
import type { WebSocket } from 'ws';
import { SECOND } from '../time.js';
import { type ClobLevel, clobBookHash } from '../venues/clob.js';
import { TICKS, bestAsk, bestBid, ladders } from './orderbook.js';
import type { Clock } from '../clock.js';
import { FINE_TICK, type Sim, type SimMarket, TICK } from './sim.js';
import { type Outgoing, type StreamClient, type StreamFaults, StreamServer } from './streamserver.js';

export const MARKET_CHANNEL_PATH = '/ws/market';

interface Subscription {
  market: SimMarket;
  index: 0 | 1;
  /** Changes up to this clock time have been sent (or lost to a fault). */
  cursor: number;
  /** The book as this connection's changes have left it, for the hashes and best levels. */
  sizes: Float64Array;
}

interface Client extends StreamClient {
  assets: Map<string, Subscription>;
}

export function conditionId(m: SimMarket): string {
  return `0x${m.code.toString(16).padStart(64, 'a')}`;
}

const level = (price: number, size: number): ClobLevel => ({ price: String(price), size: size.toFixed(2) });

/** A token's book as the CLOB summarizes it (bids ascending, asks descending: best levels last), with its hash. */
export function clobSummary(sim: Sim, m: SimMarket, index: 0 | 1, t: number) {
  const state = sim.bookState(m, index, t);
  return summaryOf(m, index, Math.min(state.ts, t), state.sizes);
}

function summaryOf(m: SimMarket, index: 0 | 1, timestamp: number, sizes: Float64Array) {
  const { bids, asks } = ladders({ ts: timestamp, seq: 0, sizes });
  const body = {
    market: conditionId(m),
    asset_id: m.tokenIds[index],
    timestamp: String(timestamp),
    bids: bids.map(([p, s]) => level(p, s)).reverse(),
    asks: asks.map(([p, s]) => level(p, s)).reverse(),
  };
  return { ...body, hash: clobBookHash(body) };
}

export class MarketChannel extends StreamServer<Client> {
  subscriptions = 0;

  constructor(sim: Sim, clock: Clock, random: () => number, faults: Partial<StreamFaults> = {}) {
    super(sim, clock, random, faults, MARKET_CHANNEL_PATH);
  }

  protected accept(socket: WebSocket): Client {
    const client: Client = { socket, assets: new Map(), held: null };
    socket.on('message', (data, isBinary) => {
      const text = isBinary ? '' : data.toString();
      // Heartbeats are answered even while data is frozen: that is what makes a freeze silent.
      if (text === 'PING') return socket.send('PONG');
      let request: { assets_ids?: unknown; type?: unknown; operation?: unknown };
      try {
        request = JSON.parse(text);
      } catch {
        return socket.send(JSON.stringify({ error: 'invalid json' }));
      }
      if (!Array.isArray(request.assets_ids)) return socket.send(JSON.stringify({ error: 'assets_ids required' }));
      if (request.operation === 'unsubscribe') {
        for (const id of request.assets_ids) client.assets.delete(String(id));
        return;
      }
      this.subscribe(client, request.assets_ids.map(String));
    });
    return client;
  }

  private subscribe(client: Client, ids: string[]): void {
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
      client.assets.set(id, { market, index, cursor: Math.max(now, at), sizes: current.sizes.slice() });
      this.subscriptions++;
      books.push({ event_type: 'book', ...summaryOf(market, index, Math.min(state.ts, at), state.sizes) });
    }
    // The venue answers a subscription with one array of snapshots.
    if (books.length) client.socket.send(JSON.stringify(books));
  }

  /** Every change since each subscription's cursor, grouped as the venue groups them: one message per market and instant. */
  protected pending(client: Client, now: number): Outgoing[] {
    const messages = new Map<string, { t: number; body: Record<string, unknown>; changes: Record<string, string>[] }>();
    // Trades and tick changes: messages of one asset that carry no book change.
    const assetEvents: { t: number; body: Record<string, unknown> }[] = [];
    for (const [id, sub] of client.assets) {
      const { market, index } = sub;
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
        m.changes.push(entry);
        if (last) {
          const summary = summaryOf(market, index, c.t, sub.sizes);
          const bid = bestBid(sub.sizes);
          const ask = bestAsk(sub.sizes);
          for (const e of m.changes) {
            if (e.asset_id !== id || e.hash) continue;
            e.hash = summary.hash;
            e.best_bid = bid === null ? '0' : String(bid / 100);
            e.best_ask = ask === null ? '1' : String(ask / 100);
          }
        }
      }
      for (let s = Math.floor(sub.cursor / SECOND) + 1; s * SECOND <= to; s++) {
        const price = this.sim.tradeAt(market, index, s);
        if (price === null) continue;
        assetEvents.push({
          t: s * SECOND,
          body: {
            event_type: 'last_trade_price',
            asset_id: id,
            market: conditionId(market),
            price: price.toFixed(2),
            side: this.sim.rand(market.code, 'trade-side', s) < 0.5 ? 'BUY' : 'SELL',
            size: (5 + Math.floor(this.sim.rand(market.code, 'trade-size', index, s) * 500)).toFixed(2),
            fee_rate_bps: '0',
            timestamp: String(s * SECOND),
          },
        });
      }
      const tickAt = this.sim.tickChangeAt(market);
      if (tickAt !== null && tickAt > sub.cursor && tickAt <= to) {
        assetEvents.push({
          t: tickAt,
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
    const out: { t: number; body: Record<string, unknown>; changes: Record<string, string>[] }[] = [
      ...[...messages.values()].map((m) => ({ t: m.t, body: { ...m.body, price_changes: m.changes }, changes: m.changes })),
      ...assetEvents.map((x) => ({ ...x, changes: [] })),
    ].sort((a, b) => a.t - b.t);
    return out.map(({ t, body, changes }) => ({
      text: JSON.stringify(body),
      changes: changes.length,
      keys: changes.map((c) => `${c.asset_id}@${t}`),
    }));
  }
}
