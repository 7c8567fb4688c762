// One record from several recorders (captures recording the same venues on different hosts).
// Rows are facts: the merged partition holds every row any recorder kept, once, and says which
// recorders kept it. Two books of one market outcome at one venue instant that differ are not
// facts: neither is kept, and the span until the next book is a gap (`recorders_disagree`).
// Gaps are claims of absence, so a recorder's gap survives only where no other recorder vouches
// for the span: from its first book of the market on, minus its own gaps, and only up to its
// horizon, the time before which everything it recorded is sealed and published (a recorder
// still down has written no gap for its downtime yet, so nothing after its horizon is its claim).
// Everything here is a function of its inputs: any process merging the same inputs writes
// sha256-equal files, so merges run anywhere, twice, without a lock.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Dataset, GapRow } from '../records.js';
import type { Duck } from './duckdb.js';
import { causeOf } from './certificate.js';
import { shortHash } from './fsutil.js';
import { type Column, type Partition, SCHEMAS, SORT_KEYS } from './layout.js';
import { type ManifestFile, OUTCOME_INDEXES, type RecorderClaim } from './manifest.js';
import { parquetSource, spoolSource, sqlIdent, sqlPath, sqlString } from './sql.js';
import { writeParquet } from './writer.js';
import { type Span, subtract } from '../time.js';

/** Which recorders kept a merged row, in name order. */
export const RECORDERS_COLUMN: Column = { name: 'recorders', type: 'VARCHAR[]' };

export interface RecorderFiles {
  recorder: string;
  /** Sealed Parquet of one partition, on local disk. */
  files: readonly string[];
}

/**
 * What makes two rows one observation, and for books what they must agree on. Trades are events:
 * identical ones are told apart by their order in each recorder's record (`nth`).
 */
const IDENTITY: Record<
  Exclude<Dataset, 'gaps'>,
  { key: readonly string[]; content?: readonly string[]; counted?: boolean; prefer?: string; newest?: string }
> = {
  books: {
    key: ['market_id', 'token_id', 'ts'],
    content: ['bid_prices', 'bid_sizes', 'ask_prices', 'ask_sizes'],
    // A polled book's `ts` is when capture asked; two recorders asking at one instant may be
    // answered with the venue's book of two instants (`exchange_ts`): the newer is the book at
    // `ts`, the older a view the venue had moved past. Only books of one venue instant can disagree.
    newest: 'exchange_ts',
    // Of equal books, the one a venue check vouched for.
    prefer: 'verified_by IS NULL',
  },
  trades: { key: ['market_id', 'token_id', 'ts', 'price', 'size', 'side', 'transaction_hash'], counted: true },
  metrics: { key: ['market_id', 'token_id', 'ts'] },
  reference: { key: ['source', 'symbol', 'ts'] },
  markets: { key: SCHEMAS.markets.map((c) => c.name) },
};

/**
 * Every input row with its recorder, the dataset's columns by name (recorders run one release).
 * `doubted` (a file `stageDoubts` wrote) leaves out books a recorder kept inside its own gap where
 * another recorder vouches for the span.
 */
function inputRows(dataset: Dataset, inputs: readonly RecorderFiles[], doubted: string | null): string {
  const columns = SCHEMAS[dataset].map((c) => `x.${sqlIdent(c.name)}`).join(', ');
  return inputs
    .filter((i) => i.files.length > 0)
    .map((i) => {
      const dropped =
        doubted && dataset === 'books'
          ? ` WHERE NOT EXISTS (SELECT 1 FROM ${doubtSource(doubted)} d WHERE d.recorder = ${sqlString(i.recorder)}
              AND d.market_id = x.market_id AND epoch_ms(x.ts) > d.after_ms AND epoch_ms(x.ts) < d.before_ms)`
          : '';
      return `SELECT ${sqlString(i.recorder)} AS recorder, ${columns} FROM ${parquetSource([...i.files], 'union_by_name=true')} x${dropped}`;
    })
    .join(' UNION ALL ');
}

/**
 * A span of a market in which one recorder's books are in doubt (it has a books gap there: a
 * copy that missed a change keeps writing rows until it finds out, and its gap reaches back over
 * them) while another recorder vouches for it. The merge drops that gap (mergeGaps), so the
 * doubted rows must go too, or they would stand in the record outside every gap; the other
 * recorder's rows are the record there. Epoch ms, both ends open.
 */
export interface Doubt {
  recorder: string;
  market_id: string;
  after_ms: number;
  before_ms: number;
}

/** Every recorder's doubted spans (its books gaps, open ones included, where another vouches), in a fixed order. */
export function doubtedSpans(recorders: readonly RecorderClaims[]): Doubt[] {
  const out = new Map<string, Doubt>();
  for (const r of recorders)
    for (const g of r.near) {
      if (g.dataset !== 'books' || g.market_id === null) continue;
      for (const o of recorders)
        if (o !== r)
          for (const [from, to] of covered(o, g.market_id)) {
            // A gap's book at its `to_ts` is the resync, known. Its book at `from_ts` is the last
            // one kept where the copy stopped (a downtime, a cut connection), but where the copy was
            // found wrong (an unproved cause) the gap starts at its last proof, and a proof by best
            // levels alone can stand on a book whose sizes were wrong (seen under load): that book
            // is in doubt too. `o` vouches for [from, to): in whole ms, after from - 1.
            const start = causeOf(g.reason) === 'unproved' ? g.from_ts - 1 : g.from_ts;
            const d = {
              recorder: r.recorder,
              market_id: g.market_id,
              after_ms: Math.max(start, from - 1),
              before_ms: Math.min(g.to_ts, to),
            };
            if (d.before_ms - d.after_ms > 1) out.set(JSON.stringify(d), d);
          }
    }
  return [...out.values()].sort(
    (a, b) =>
      a.recorder.localeCompare(b.recorder) ||
      a.market_id.localeCompare(b.market_id) ||
      a.after_ms - b.after_ms ||
      a.before_ms - b.before_ms,
  );
}

/** Doubted spans as an NDJSON file in `dir` for the statements to read (null: none to stage). */
export async function stageDoubts(dir: string, found: readonly Doubt[]): Promise<string | null> {
  if (!found.length) return null;
  await fs.mkdir(dir, { recursive: true });
  const file = path.join(dir, `.doubts-${shortHash(JSON.stringify(found))}.ndjson`);
  await fs.writeFile(file, found.map((d) => JSON.stringify(d)).join('\n') + '\n');
  return file;
}

function doubtSource(file: string): string {
  return `read_json(${sqlPath(file)}, format='newline_delimited', columns={recorder: 'VARCHAR', market_id: 'VARCHAR', after_ms: 'BIGINT', before_ms: 'BIGINT'})`;
}

/**
 * Each observation once, with `recorders`, whether the recorders `agreed` on it (books), and
 * `next_ts`, the observation of the same key prefix (market outcome) after it. Pure SQL text:
 * the only spliced values are file paths and recorder names the server computed and checked.
 */
export function observationsSql(
  dataset: Exclude<Dataset, 'gaps'>,
  inputs: readonly RecorderFiles[],
  doubted: string | null = null,
): string {
  const { key, content, counted, prefer, newest } = IDENTITY[dataset];
  const keys = [...key, ...(counted ? ['nth'] : [])].map(sqlIdent).join(', ');
  const nth = counted
    ? `, row_number() OVER (PARTITION BY recorder, ${key.map(sqlIdent).join(', ')} ORDER BY recv_ts, exchange_ts, source) AS nth`
    : '';
  const agreed = content ? `(min(content) OVER k) IS NOT DISTINCT FROM (max(content) OVER k)` : 'true';
  const contentColumn = content ? `, {${content.map((c) => `${sqlIdent(c)}: ${sqlIdent(c)}`).join(', ')}} AS content` : '';
  const next = dataset === 'books' ? ', lead(ts) OVER (PARTITION BY market_id, token_id ORDER BY ts) AS next_ts' : '';
  return `(SELECT * EXCLUDE (pick)${next} FROM (
    SELECT * EXCLUDE (recorder${content ? ', content' : ''}${counted ? ', nth' : ''}),
      list_sort(list_distinct(list(recorder) OVER k)) AS recorders,
      ${agreed} AS agreed,
      row_number() OVER (PARTITION BY ${keys} ORDER BY ${prefer ? `${prefer}, ` : ''}recorder) AS pick
    FROM (SELECT *${contentColumn}${nth} FROM (${inputRows(dataset, inputs, doubted)})${
      newest
        ? ` QUALIFY ${sqlIdent(newest)} IS NOT DISTINCT FROM max(${sqlIdent(newest)}) OVER (PARTITION BY ${key.map(sqlIdent).join(', ')})`
        : ''
    })
    WINDOW k AS (PARTITION BY ${keys})
  ) WHERE pick = 1)`;
}

/** Two or more recorders' different books of one market outcome at one instant. */
export interface Disagreement {
  market_id: string;
  token_id: string;
  ts: number;
  /** The next book of the outcome any recorder kept, or null: the span the record cannot vouch for. */
  next_ts: number | null;
  recorders: string[];
}

/** Where the recorders' books (less the doubted ones, `stageDoubts`'s file) differ at one instant. */
export async function disagreements(duck: Duck, inputs: readonly RecorderFiles[], doubted: string | null = null): Promise<Disagreement[]> {
  if (!inputs.some((i) => i.files.length)) return [];
  const rows = await duck.rows(
    `SELECT market_id, token_id, epoch_ms(ts)::DOUBLE AS ts, epoch_ms(next_ts)::DOUBLE AS next_ts, recorders
     FROM ${observationsSql('books', inputs, doubted)} WHERE NOT agreed ORDER BY market_id, token_id, ts`,
  );
  return rows.map((r) => ({
    market_id: String(r.market_id),
    token_id: String(r.token_id),
    ts: Number(r.ts),
    next_ts: r.next_ts === null ? null : Number(r.next_ts),
    recorders: (r.recorders as unknown[]).map(String),
  }));
}

/**
 * The merged file of one partition's rows, written to `<lakeDir>/<partition>/<name>` (books that
 * recorders disagree on, and the doubted ones of `stageDoubts`'s file, left out); its manifest
 * entry's `written_at` is `writtenAt`.
 */
export async function mergeRows(
  duck: Duck,
  lakeDir: string,
  partition: Partition,
  inputs: readonly RecorderFiles[],
  name: string,
  { sources, writtenAt, doubted = null }: { sources: string[]; writtenAt: number; doubted?: string | null },
): Promise<ManifestFile | null> {
  if (partition.dataset === 'gaps') throw new Error('gaps are merged by mergeGaps');
  if (!inputs.some((i) => i.files.length)) return null;
  const source = `(SELECT * EXCLUDE (agreed${partition.dataset === 'books' ? ', next_ts' : ''}) FROM ${observationsSql(partition.dataset, inputs, doubted)} WHERE agreed)`;
  return writeParquet(duck, lakeDir, partition, name, source, sources, {
    extra: [RECORDERS_COLUMN],
    writtenAt,
    servingCopy: false,
    order: totalOrder(partition.dataset),
  });
}

/** The dataset's sort keys, then every other column: no two different rows tie, so every merger writes one order. */
function totalOrder(dataset: Dataset): string[] {
  const keys = SORT_KEYS[dataset];
  return [...keys, ...[...SCHEMAS[dataset], RECORDERS_COLUMN].map((c) => c.name).filter((c) => !keys.includes(c))];
}

/** What one recorder can vouch for, as the merge of a gaps partition needs it. */
export interface RecorderClaims {
  recorder: string;
  /** Its gaps in the partition being merged. */
  own: readonly GapRow[];
  /** Its gaps that may reach into the partition's spans: its own and the hours either side. */
  near: readonly GapRow[];
  /** When it first held each market whole, a book of every outcome (`wholeFrom`; the hours either side included). */
  first: ReadonlyMap<string, number>;
  /** Everything it recorded before this is sealed and published; after it, it vouches for nothing. */
  horizon: number;
}

export type MergedGap = GapRow & { recorders: string[] };

/**
 * From when a recorder's books files hold each market whole: the instant every outcome has a
 * book (`RecorderClaims.first`). A recorder that holds one outcome's book alone (the other's
 * snapshot still to come) vouches for nothing of the other, so a change of it another recorder
 * missed must stay that one's gap. Files sealed before outcomes' first times were kept give the
 * market's first book for every outcome, as before.
 */
export function wholeFrom(files: readonly Pick<ManifestFile, 'markets'>[]): Map<string, number> {
  const firsts = new Map<string, number[]>();
  for (const f of files)
    for (const [market, span] of Object.entries(f.markets ?? {})) {
      const mine = firsts.get(market) ?? OUTCOME_INDEXES.map(() => Infinity);
      const byOutcome = span[5] ?? OUTCOME_INDEXES.map(() => span[1]);
      for (const o of OUTCOME_INDEXES) mine[o] = Math.min(mine[o], byOutcome[o] ?? Infinity);
      firsts.set(market, mine);
    }
  const whole = new Map<string, number>();
  for (const [market, mine] of firsts) if (mine.every(Number.isFinite)) whole.set(market, Math.max(...mine));
  return whole;
}

/** What `r` vouches for of a market's books: from its first book to its horizon, less its gaps. */
function covered(r: RecorderClaims, market: string): Span[] {
  const first = r.first.get(market);
  if (first === undefined) return [];
  const holes = r.near.filter((g) => g.market_id === market && g.dataset === 'books').map((g): Span => [g.from_ts, g.to_ts]);
  return subtract([[first, r.horizon]], holes);
}

/**
 * The merged gaps of one partition. A market's books gap of one recorder is kept where no other
 * recorder vouches for the span, with its recorder's reason (two recorders both lacking a span
 * give a row each); every other gap (a series' discovery, trades, reference feeds) is kept as it
 * is, an identical one of several recorders once. Disagreements become `recorders_disagree` gaps
 * until the next book (or `hourEnd`, when none follows in the partition).
 */
export function mergeGaps(recorders: readonly RecorderClaims[], found: readonly Disagreement[], hourEnd: number): MergedGap[] {
  const rows: MergedGap[] = [];
  for (const r of recorders) {
    for (const g of r.own) {
      if (g.market_id === null || g.dataset !== 'books') {
        rows.push({ ...g, recorders: [r.recorder] });
        continue;
      }
      const vouched = recorders.filter((o) => o !== r).flatMap((o) => covered(o, g.market_id!));
      for (const [from, to] of subtract([[g.from_ts, g.to_ts]], vouched))
        rows.push({ ...g, from_ts: from, to_ts: to, recorders: [r.recorder] });
    }
  }
  for (const run of disagreementRuns(found))
    rows.push({
      market_id: run.market_id,
      dataset: 'books',
      // As every gap of the record: the book is known at `from_ts` and not after it, up to `to_ts`.
      // The disputed instant's own book is left out, so the span starts just before it.
      from_ts: run.ts - 1,
      to_ts: run.to ?? hourEnd,
      reason: 'recorders_disagree',
      detail: `token ${run.token_id}: ${run.recorders.join(', ')} kept different books at ${run.instants === 1 ? 'this instant' : `${run.instants} instants in a row`}`,
      failures: run.instants,
      recorders: run.recorders,
    });
  // The same gap from several recorders once, naming them all; then a fixed order.
  const byGap = new Map<string, MergedGap>();
  for (const row of rows) {
    const id = JSON.stringify([row.market_id, row.dataset, row.from_ts, row.to_ts, row.reason, row.detail, row.failures]);
    const held = byGap.get(id);
    if (held) held.recorders = [...new Set([...held.recorders, ...row.recorders])].sort();
    else byGap.set(id, { ...row, recorders: [...row.recorders].sort() });
  }
  return [...byGap.values()].sort(
    (a, b) =>
      (a.market_id ?? '').localeCompare(b.market_id ?? '') ||
      a.from_ts - b.from_ts ||
      a.to_ts - b.to_ts ||
      a.dataset.localeCompare(b.dataset) ||
      a.reason.localeCompare(b.reason) ||
      a.recorders.join(',').localeCompare(b.recorders.join(',')),
  );
}

/**
 * Disagreements of one outcome in a row (each the next book after the last) as one span: a copy
 * that missed a change disagrees at every instant until it resyncs, and one gap says so, not many
 * abutting ones. `found` is in (market, token, ts) order.
 */
function disagreementRuns(found: readonly Disagreement[]): (Disagreement & { to: number | null; instants: number })[] {
  const runs: (Disagreement & { to: number | null; instants: number })[] = [];
  for (const d of found) {
    const last = runs.at(-1);
    if (last && last.market_id === d.market_id && last.token_id === d.token_id && last.to === d.ts) {
      last.to = d.next_ts;
      last.instants++;
      last.recorders = [...new Set([...last.recorders, ...d.recorders])].sort();
    } else runs.push({ ...d, to: d.next_ts, instants: 1 });
  }
  return runs;
}

/**
 * Each recorder's claim on the markets of a group, as its manifest entry keeps it: every market
 * some recorder has a first book or a books gap of, with this recorder's first book (null when it
 * has none) and its books gaps (its own and the hours either side, open ones included).
 */
export function recorderClaims(recorders: readonly RecorderClaims[]): Record<string, RecorderClaim> {
  const markets = new Set<string>();
  for (const r of recorders) {
    for (const m of r.first.keys()) markets.add(m);
    for (const g of r.near) if (g.dataset === 'books' && g.market_id !== null) markets.add(g.market_id);
  }
  const ordered = [...markets].sort();
  const out: Record<string, RecorderClaim> = {};
  for (const r of [...recorders].sort((a, b) => a.recorder.localeCompare(b.recorder))) {
    const claim: RecorderClaim = { horizon: r.horizon, markets: {} };
    for (const market of ordered) {
      const seen = new Map<string, [number, number, string]>();
      for (const g of r.near)
        if (g.dataset === 'books' && g.market_id === market)
          seen.set(JSON.stringify([g.from_ts, g.to_ts, g.reason]), [g.from_ts, g.to_ts, g.reason]);
      const gaps = [...seen.values()].sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2].localeCompare(b[2]));
      claim.markets[market] = { first: r.first.get(market) ?? null, gaps };
    }
    out[r.recorder] = claim;
  }
  return out;
}

/** Gap rows of sealed files, times in epoch ms. */
export async function readGaps(duck: Duck, files: readonly string[]): Promise<GapRow[]> {
  if (!files.length) return [];
  const rows = await duck.rows(
    `SELECT market_id, dataset, epoch_ms(from_ts)::DOUBLE AS from_ts, epoch_ms(to_ts)::DOUBLE AS to_ts, reason, detail, failures::DOUBLE AS failures
     FROM ${parquetSource([...files], 'union_by_name=true')}`,
  );
  return rows.map((r) => ({
    market_id: r.market_id === null ? null : String(r.market_id),
    dataset: String(r.dataset) as GapRow['dataset'],
    from_ts: Number(r.from_ts),
    to_ts: Number(r.to_ts),
    reason: String(r.reason),
    detail: r.detail === null ? null : String(r.detail),
    failures: Number(r.failures),
  }));
}

/**
 * Merged gaps as a sealed file of the gaps partition, through an NDJSON file beside it, its entry
 * carrying the recorders' claims (no rows when no gap was left, so the claims are still kept).
 */
export async function writeGaps(
  duck: Duck,
  lakeDir: string,
  partition: Partition,
  gaps: readonly MergedGap[],
  name: string,
  { sources, writtenAt, claims }: { sources: string[]; writtenAt: number; claims: Record<string, RecorderClaim> },
): Promise<ManifestFile> {
  const staging = path.join(lakeDir, `.${name}.ndjson`);
  await fs.mkdir(lakeDir, { recursive: true });
  await fs.writeFile(staging, gaps.map((g) => JSON.stringify(g)).join('\n') + '\n');
  try {
    const source = spoolSource('gaps', [staging], false, [RECORDERS_COLUMN]);
    const entry = await writeParquet(duck, lakeDir, partition, name, source, sources, {
      extra: [RECORDERS_COLUMN],
      writtenAt,
      servingCopy: false,
      order: totalOrder('gaps'),
    });
    return { ...entry, recorders: claims };
  } finally {
    await fs.rm(staging, { force: true });
  }
}
