// JSON shapes of CONTRACT.md section 4, built once per row in the cheapest place.
import type { DuckDBDataChunk } from '@duckdb/node-api';
import type { JsonRow } from '../lake/duckdb.js';
import { type RenderedSnapshots, bookFragment, columnsOf } from '../pages/render.js';
import type { WindowStatus } from '../lake/certificate.js';
import type { MarketReference } from '../lake/referenceprice.js';
import type { StoredMarket } from '../lake/reader.js';
import type { Book } from '../records.js';

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/** `coverage`: the sealed window's, or null while open, unsealed or sealed before manifests carried spans. */
export function marketJson(m: StoredMarket, window: WindowStatus | null = null, reference: MarketReference | null = null) {
  const coverage = window?.coverage ?? null;
  const winner = m.winning_outcome_index === null ? null : (m.outcomes.find((o) => o.index === m.winning_outcome_index) ?? null);
  return {
    market_id: m.market_id,
    topic_id: m.topic_id,
    venue: m.venue === 'wallet-prediction' ? 'predict_fun' : 'polymarket',
    slug: m.slug,
    title: m.title,
    coin: m.coin,
    window: m.window,
    start_time: iso(m.start_time),
    end_time: iso(m.end_time),
    created_time: iso(m.created_time),
    resolved_time: iso(m.resolved_time),
    // How long after its window the venue resolved it (the venue's own resolution time; null until then).
    resolution_latency_seconds: m.resolved_time === null ? null : (m.resolved_time - m.end_time) / 1000,
    status: m.status,
    // The certificate's summary: the share of the window covered, and the seconds missing by cause;
    // for a record merged from several recorders, each one's own beside it.
    coverage: coverage && {
      share: coverage.share,
      missing_seconds: coverage.by_cause,
      recorders:
        window?.recorders &&
        Object.fromEntries(Object.entries(window.recorders).map(([r, c]) => [r, { share: c.share, missing_seconds: c.by_cause }])),
    },
    // How far the window's record can be trusted yet (see the certificate route), and when its sealed books last changed.
    availability: { state: window?.state ?? null, last_modified: iso(window?.last_modified ?? null) },
    resolution: m.resolution,
    winning_outcome: winner && { index: winner.index, label: winner.label, token_id: winner.token_id },
    condition: {
      condition_id: m.condition_id,
      question_id: m.question_id,
      oracle: m.oracle,
      outcome_slot_count: m.outcomes.length || null,
    },
    outcomes: m.outcomes.map((o) => ({ index: o.index, label: o.label, token_id: o.token_id })),
    volume: m.volume,
    liquidity: m.liquidity,
    participant_count: m.participant_count,
    chain: { chain_id: m.chain_id, name: m.chain_name },
    exchange: {
      address: m.exchange_address,
      kind: m.exchange_kind,
      collateral: m.collateral,
      fee_rate_bps: m.fee_rate_bps,
      tick_size: m.tick_size,
    },
    reference_price: { start: m.reference_price_start, end: m.reference_price_end },
    reference: reference && referenceJson(reference),
  };
}

export function referenceJson(r: MarketReference) {
  const point = (o: { ts: number; price: number } | null) => o && { ts: iso(o.ts), price: o.price };
  return { ...r, open: point(r.open), close: point(r.close) };
}

export interface BookJson {
  outcome_index: number;
  outcome: string;
  token_id: string;
  exchange_time: string | null;
  bid_prices: number[];
  bid_sizes: number[];
  ask_prices: number[];
  ask_sizes: number[];
}

export type BookLike = Pick<Book, 'outcome_index' | 'outcome' | 'token_id' | 'bid_prices' | 'bid_sizes' | 'ask_prices' | 'ask_sizes'> & {
  exchange_ts: number | null;
};

/** A book of the latest-book route (snapshot pages are rendered from vectors: snapshotsJson). */
export function bookJson(b: BookLike): BookJson {
  return {
    outcome_index: b.outcome_index,
    outcome: b.outcome,
    token_id: b.token_id,
    exchange_time: iso(b.exchange_ts),
    bid_prices: b.bid_prices,
    bid_sizes: b.bid_sizes,
    ask_prices: b.ask_prices,
    ask_sizes: b.ask_sizes,
  };
}

export function rowBook(r: JsonRow): BookLike {
  return {
    outcome_index: Number(r.outcome_index),
    outcome: String(r.outcome),
    token_id: String(r.token_id),
    exchange_ts: r.exchange_ts === null ? null : Number(r.exchange_ts),
    bid_prices: r.bid_prices as number[],
    bid_sizes: r.bid_sizes as number[],
    ask_prices: r.ask_prices as number[],
    ask_sizes: r.ask_sizes as number[],
  };
}

/**
 * The first `maxTimes` capture times of `chunks` as JSON text, read straight from the result's
 * vectors: list columns are walked in their flat Float64Array storage, so no per-value objects
 * are made (that conversion cost as much as the query). Rows are put in page order here (time in
 * `order`, outcomes ascending), so a statement need not sort rows that carry four lists.
 * Columns as snapshotBooksSql selects them.
 */
export function snapshotsJson(chunks: DuckDBDataChunk[], ladders: boolean, order: 'asc' | 'desc', maxTimes: number): RenderedSnapshots {
  const rows: { chunk: number; row: number; ts: number; outcome: number }[] = [];
  const columns = chunks.map(columnsOf);
  chunks.forEach((chunk, c) => {
    const { ts, outcome_index: index } = columns[c];
    for (let row = 0; row < chunk.rowCount; row++)
      rows.push({ chunk: c, row, ts: ts.getItem(row) as number, outcome: index.getItem(row) as number });
  });
  const direction = order === 'asc' ? 1 : -1;
  rows.sort((a, b) => (a.ts - b.ts) * direction || a.outcome - b.outcome);
  const parts: string[] = [];
  let open: number | null = null;
  let last: number | null = null;
  let times = 0;
  let books = 0;
  for (const { chunk, row, ts: t } of rows) {
    if (t !== open) {
      times++;
      if (open !== null && times <= maxTimes + 1) parts.push(']}');
      open = t;
      if (times > maxTimes) continue;
      parts.push(`${times > 1 ? ',' : ''}{"timestamp":"${new Date(t).toISOString()}","books":[`);
      last = t;
    } else if (times > maxTimes) {
      continue;
    } else {
      parts.push(',');
    }
    parts.push(bookFragment(columns[chunk], row, ladders));
    books++;
  }
  if (open !== null && times <= maxTimes) parts.push(']}');
  return { json: `[${parts.join('')}]`, books, times, last };
}

export { iso };
export {
  type MarketBooks,
  type PageSpec,
  type RenderedSnapshots,
  marketBooks,
  numbers,
  pageFromBooks,
  readDoubles,
} from '../pages/render.js';
