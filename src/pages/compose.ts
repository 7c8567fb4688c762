// One market's books from the blocks of several files' copies, as one set of rows in time order.
import { HEAD, type MarketBooks, search, withBytes } from './render.js';

/** Rows [lo, hi) of one market's books, sharing its buffers. */
function slice(b: MarketBooks, lo: number, hi: number): MarketBooks {
  if (lo === 0 && hi === b.ts.length) return b;
  return withBytes({
    ts: b.ts.subarray(lo, hi),
    outcome: b.outcome.subarray(lo, hi),
    ladder: b.ladder,
    ladderAt: b.ladderAt.subarray(lo, hi + 1),
    summary: b.summary,
    summaryAt: b.summaryAt.subarray(lo, hi + 1),
    heads: b.heads.subarray(lo * HEAD, hi * HEAD),
  });
}

/**
 * One market's books from several files: the rows in [from, to), in (time, outcome) order. One
 * file (most markets) is a slice of its block; several are copied into one set of buffers.
 */
export function composeBooks(parts: MarketBooks[], from: number, to: number): MarketBooks {
  const ranged = parts.map((b) => slice(b, search(b.ts, from, false), search(b.ts, to, false))).filter((b) => b.ts.length > 0);
  if (ranged.length === 1) return ranged[0];
  const rows: [part: number, row: number][] = [];
  ranged.forEach((b, p) => {
    for (let i = 0; i < b.ts.length; i++) rows.push([p, i]);
  });
  // Files of one partition may interleave in time (a busy hour sealed in stretches): sort, stably.
  const key = ([p, i]: [number, number]) => ranged[p].ts[i];
  rows.sort((x, y) => key(x) - key(y) || ranged[x[0]].outcome[x[1]] - ranged[y[0]].outcome[y[1]]);
  const n = rows.length;
  const ts = new Float64Array(n);
  const outcome = new Int32Array(n);
  const ladderAt = new Uint32Array(n + 1);
  const summaryAt = new Uint32Array(n + 1);
  const heads = Buffer.allocUnsafe(n * HEAD);
  rows.forEach(([p, i], k) => {
    const b = ranged[p];
    ts[k] = b.ts[i];
    outcome[k] = b.outcome[i];
    ladderAt[k + 1] = ladderAt[k] + b.ladderAt[i + 1] - b.ladderAt[i];
    summaryAt[k + 1] = summaryAt[k] + b.summaryAt[i + 1] - b.summaryAt[i];
    b.heads.copy(heads, k * HEAD, i * HEAD, (i + 1) * HEAD);
  });
  const ladder = Buffer.allocUnsafe(ladderAt[n]);
  const summary = Buffer.allocUnsafe(summaryAt[n]);
  rows.forEach(([p, i], k) => {
    const b = ranged[p];
    b.ladder.copy(ladder, ladderAt[k], b.ladderAt[i], b.ladderAt[i + 1]);
    b.summary.copy(summary, summaryAt[k], b.summaryAt[i], b.summaryAt[i + 1]);
  });
  return withBytes({ ts, outcome, ladder, ladderAt, summary, summaryAt, heads });
}
