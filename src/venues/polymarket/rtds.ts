// Polymarket's Real-Time Data Socket (UPSTREAMS.md E, docs/RTDS-STUDY.md): the reference prices
// the up-or-down markets resolve on (`crypto_prices_chainlink`) and the exchange's beside them
// (`crypto_prices`). Subscriptions carry no filter: the venue's clients disagree on how a filter is
// written and third parties report each form refused, so every symbol of a topic comes and the
// recorder keeps its coins' (as Polymarket's newest SDK does). The socket sends no sequence and
// no snapshot on an unfiltered subscription; a filtered one may first get a `type:"subscribe"`
// frame of recent points, which is taken too.
import type { StreamProtocol } from '../channel.js';
import type { ReferenceRow, ReferenceSource } from '../../records.js';

export const RTDS_TOPICS: Record<ReferenceSource, string> = {
  chainlink: 'crypto_prices_chainlink',
  binance: 'crypto_prices',
};

const SOURCE_OF_TOPIC = new Map(Object.entries(RTDS_TOPICS).map(([source, topic]) => [topic, source as ReferenceSource]));

/** One observation as the socket relayed it, before capture stamps its arrival. */
export interface Observation {
  source: ReferenceSource;
  symbol: string;
  /** The observation's own time (`payload.timestamp`). */
  ts: number;
  price: number;
  /** When the socket sent it (the message's `timestamp`). */
  sent_ts: number;
}

const finiteMs = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.trunc(v) : null);

/** A price as a JSON number or a decimal string (Polymarket's SDKs accept both). */
function priceOf(v: unknown): number | null {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+(\.\d+)?$/.test(v) ? Number(v) : NaN;
  return Number.isFinite(n) && n > 0 ? n : null;
}

/**
 * The observations in one parsed frame: an update, the points of a `subscribe` frame, or an array
 * of either. Acknowledgements, errors and other topics hold none; a malformed entry is skipped.
 */
export function observationsOf(parsed: unknown): Observation[] {
  if (Array.isArray(parsed)) return parsed.flatMap(observationsOf);
  if (typeof parsed !== 'object' || parsed === null) return [];
  const msg = parsed as { topic?: unknown; type?: unknown; timestamp?: unknown; payload?: unknown };
  const source = typeof msg.topic === 'string' ? SOURCE_OF_TOPIC.get(msg.topic) : undefined;
  const payload = msg.payload as { symbol?: unknown; timestamp?: unknown; value?: unknown; data?: unknown } | undefined;
  const sent = finiteMs(msg.timestamp);
  if (!source || !payload || typeof payload !== 'object' || sent === null || typeof payload.symbol !== 'string') return [];
  const symbol = payload.symbol.toLowerCase();
  const points =
    msg.type === 'subscribe' && Array.isArray(payload.data) ? (payload.data as { timestamp?: unknown; value?: unknown }[]) : [payload];
  const out: Observation[] = [];
  for (const p of points) {
    const ts = finiteMs(p?.timestamp);
    const price = priceOf(p?.value);
    if (ts !== null && price !== null) out.push({ source, symbol, ts, price, sent_ts: sent });
  }
  return out;
}

/** The lake row of an observation received at `recvTs`. */
export const referenceRow = (o: Observation, recvTs: number): ReferenceRow => ({
  ts: o.ts,
  source: o.source,
  symbol: o.symbol,
  price: o.price,
  sent_ts: o.sent_ts,
  recv_ts: recvTs,
});

/** The socket's framing for the channel client: its "assets" are the two topics. */
export const rtdsProtocol: StreamProtocol = {
  subscribe: (topics) => JSON.stringify({ action: 'subscribe', subscriptions: topics.map(subscription) }),
  unsubscribe: (topics) => JSON.stringify({ action: 'unsubscribe', subscriptions: topics.map(subscription) }),
  ping: 'PING',
  pong: 'PONG',
  // The parsed frame goes on whole: one frame's observations are counted as one delivery.
  unwrap: (parsed) => (observationsOf(parsed).length > 0 ? [parsed as object] : []),
};

/** The documented subscription: `type` `*` for the Chainlink topic, `update` for the exchange's. */
function subscription(topic: string): { topic: string; type: string } {
  return { topic, type: topic === RTDS_TOPICS.chainlink ? '*' : 'update' };
}
