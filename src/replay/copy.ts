// Replay copies: a finished market's messages (either venue's protocol), rendered once and kept beside the lake
// (DATA_DIR/serving/replay), so a replay reads them instead of decoding the market's ladders from
// Parquet, diffing consecutive rows and hashing every changed book (about 14 µs a message). The
// Parquet files stay the record; a copy is derived, named by the signature of everything its
// messages depend on (the market's book and trade rows as sealed, its gaps, its newest version), so
// a copy of other inputs is never read, and any copy can be removed: the replay then renders from
// the lake and writes it again. Capture seals a market's rows when it is over, and the API writes
// its copy after the update that sees them: a market that ended a minute ago has one.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { Venue } from '../config.js';
import type { Params } from '../lake/duckdb.js';
import { partitionOf, partitionDir } from '../lake/layout.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import { relation } from '../lake/sql.js';
import type { Logger } from '../log.js';
import { PolymarketWalk } from './polymarket.js';
import {
  BOOK_TAPE_COLUMNS,
  type MarketTape,
  type RenderedMessages,
  type ReplayCopyStore,
  TAPE_BOOK_SELECT,
  type TapeGap,
  TapeBooks,
  loadTape,
  settledRows,
  tapeGaps,
} from './tape.js';
import { WALLET_AGGREGATE_TOPIC, WalletWalk } from './wallet.js';
import { marketKey } from '../records.js';

/** Bumped when the rendering or the layout changes: older copies are then simply not found. */
export const REPLAY_COPY_VERSION = 2;
const MAGIC = Buffer.from('PMREPLAY', 'latin1');
/** How far back a sweep looks for markets without a copy; older ones get theirs when first replayed. */
const SWEEP_BACK_MS = 6 * 3_600_000;
/** A half-written copy this old was left by a process that died: removed, and the copy made again. */
const STALE_TMP_MS = 10 * 60_000;
/** How long a background render runs before letting requests in. */
const SLICE_MS = 5;

/**
 * What a finished market's messages depend on, hashed; null while they may still change (see
 * settledRows: a few seconds after the market's end, when capture has sealed its rows).
 */
export function copySignature(lake: LakeReader, venue: Venue, m: StoredMarket, now: number): string | null {
  const rows = settledRows(lake, venue, m, now);
  if (rows === null) return null;
  const inputs = [
    REPLAY_COPY_VERSION,
    venue,
    rows,
    tapeGaps(lake, venue, m).map((g) => [g.dataset, g.from, Number.isFinite(g.to) ? g.to : null, g.reason]),
    // The market's newest version: its tick, resolution and ids are in the messages.
    m.ts,
    m.condition_id,
    m.outcomes,
    m.exchange_kind,
    m.tick_size,
    m.resolved_time,
  ];
  return createHash('sha1').update(JSON.stringify(inputs)).digest('hex');
}

interface Header {
  version: number;
  market_id: string;
  signature: string;
  rows: number;
  trades: number;
  keys: number;
  /** The messages' bytes, and as stored (raw deflate). */
  text: number;
  packed: number;
  ticks: { ts: number; tick: number }[];
  gaps: (Omit<TapeGap, 'to'> & { to: number | null })[];
}

/**
 * The sections after the header, each at a multiple of 8 so typed arrays can view them: row times
 * and outcomes, trade times, prices and outcomes (what a walk reads of them: its messages are
 * rendered), the rendered keys and their offsets into the messages, the messages deflated.
 */
function sections(h: Header) {
  const sizes = [8 * h.rows, 4 * h.rows, 8 * h.trades, 8 * h.trades, 4 * h.trades, 4 * h.keys, 4 * (h.keys + 1), h.packed];
  const at: number[] = [];
  let offset = 0;
  for (const size of sizes) {
    at.push(offset);
    offset += Math.ceil(size / 8) * 8;
  }
  return { at, length: offset };
}

/** The file of a tape whose every message is rendered (`rendered` a map, as a full walk leaves it). */
export function encodeCopy(tape: MarketTape, signature: string): Buffer {
  const rendered = tape.rendered as Map<number, string>;
  const keys = Int32Array.from([...rendered.keys()].sort((a, b) => a - b));
  const texts = [...keys].map((k) => Buffer.from(rendered.get(k)!, 'utf8'));
  const offsets = new Uint32Array(keys.length + 1);
  texts.forEach((t, i) => (offsets[i + 1] = offsets[i] + t.length));
  // Messages repeat long ids and numbers: level 1 takes most of the room out and inflates fast.
  const packed = deflateRawSync(Buffer.concat(texts), { level: 1 });
  const { books, trades } = tape;
  const header: Header = {
    version: REPLAY_COPY_VERSION,
    market_id: tape.market.market_id,
    signature,
    rows: books.length,
    trades: trades.length,
    keys: keys.length,
    text: offsets[keys.length],
    packed: packed.length,
    ticks: tape.ticks,
    gaps: tape.gaps.map((g) => ({ ...g, to: Number.isFinite(g.to) ? g.to : null })),
  };
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  const start = Math.ceil((MAGIC.length + 4 + head.length) / 8) * 8;
  const { at, length } = sections(header);
  const out = Buffer.alloc(start + length);
  MAGIC.copy(out, 0);
  out.writeUInt32LE(head.length, MAGIC.length);
  head.copy(out, MAGIC.length + 4);
  const parts: ArrayBufferView[] = [
    books.ts,
    books.outcome,
    Float64Array.from(trades, (t) => t.ts),
    Float64Array.from(trades, (t) => t.price),
    Int32Array.from(trades, (t) => t.outcome),
    keys,
    offsets,
    packed,
  ];
  parts.forEach((p, i) => out.set(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), start + at[i]));
  return out;
}

/** Messages of a copy by key, cut from the inflated text when asked for (a walk asks in key order). */
class CopiedMessages implements RenderedMessages {
  private last = -1;

  constructor(
    private readonly keys: Int32Array,
    private readonly offsets: Uint32Array,
    private readonly text: Buffer,
  ) {}

  get size(): number {
    return this.keys.length;
  }

  get(key: number): string | undefined {
    let i = this.last + 1;
    if (this.keys[i] !== key) {
      let lo = 0;
      let hi = this.keys.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (this.keys[mid] < key) lo = mid + 1;
        else hi = mid;
      }
      if (this.keys[lo] !== key) return undefined;
      i = lo;
    }
    this.last = i;
    return this.text.toString('utf8', this.offsets[i], this.offsets[i + 1]);
  }

  set(): void {
    throw new Error('a replay copy holds every message already');
  }
}

/** A market's tape from its copy's bytes; throws when they are not a whole copy of `signature`. */
export function decodeCopy(bytes: Buffer, m: StoredMarket, signature: string): MarketTape {
  if (bytes.length < MAGIC.length + 4 || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) throw new Error('not a replay copy');
  const headLength = bytes.readUInt32LE(MAGIC.length);
  const header = JSON.parse(bytes.toString('utf8', MAGIC.length + 4, MAGIC.length + 4 + headLength)) as Header;
  if (header.version !== REPLAY_COPY_VERSION || header.signature !== signature || header.market_id !== m.market_id)
    throw new Error('a replay copy of other inputs');
  const start = Math.ceil((MAGIC.length + 4 + headLength) / 8) * 8;
  const { at, length } = sections(header);
  if (bytes.length !== start + length) throw new Error(`a replay copy of ${bytes.length} bytes, not ${start + length}`);
  // Typed arrays view whole multiples of their size: a file read into an unaligned buffer is copied once.
  const buf = (bytes.byteOffset + start) % 8 === 0 ? bytes : Buffer.from(bytes);
  const view = <T>(Type: new (b: ArrayBufferLike, o: number, n: number) => T, i: number, n: number) =>
    new Type(buf.buffer, buf.byteOffset + start + at[i], n);
  const { rows, trades: t, keys: k } = header;
  // Copied out of the file's buffer, so the packed messages are not kept alive by them.
  const books = TapeBooks.sparse(view(Float64Array, 0, rows).slice(), view(Int32Array, 1, rows).slice());
  const tradeTs = view(Float64Array, 2, t);
  const tradePrice = view(Float64Array, 3, t);
  const tradeOutcome = view(Int32Array, 4, t);
  const trades = Array.from({ length: t }, (_, i) => ({
    ts: tradeTs[i],
    outcome: tradeOutcome[i],
    price: tradePrice[i],
    size: null,
    side: null,
    feeRateBps: null,
    transactionHash: null,
    priceDecimals: null,
    sizeDecimals: null,
  }));
  const text = inflateRawSync(buf.subarray(start + at[7], start + at[7] + header.packed));
  if (text.length !== header.text) throw new Error('a replay copy whose messages do not inflate to their length');
  const offsets = view(Uint32Array, 6, k + 1).slice();
  if (offsets[k] !== header.text) throw new Error('a replay copy whose offsets do not end at its messages');
  return {
    market: m,
    books,
    trades,
    ticks: header.ticks,
    gaps: header.gaps.map((g) => ({ ...g, to: g.to ?? Infinity })),
    bytes: 200 + text.length + 12 * rows + 8 * k + 80 * t,
    rendered: new CopiedMessages(view(Int32Array, 5, k).slice(), offsets, text),
    copied: true,
  };
}

/**
 * Reads the ladders of the rows a walk of a copied tape starts from (each outcome's book at `at`):
 * one bound statement over the files of those rows' hours. Other tapes hold every ladder.
 */
async function readHeld(lake: LakeReader, venue: Venue, tape: MarketTape, at: number): Promise<void> {
  const books = tape.books;
  const m = tape.market;
  const rows = books.heldAt(at, m.outcomes.length).filter((i) => !books.has(i));
  if (!rows.length) return;
  const hours = new Map(rows.map((i) => partitionOf('books', venue, m.coin, m.window, books.ts[i])).map((p) => [partitionDir(p), p]));
  const source = relation('books', await lake.files([...hours.values()], m.market_id), BOOK_TAPE_COLUMNS);
  const params: Params = { market_id: m.market_id };
  const wanted = rows.map((i, k) => {
    params[`t${k}`] = books.ts[i];
    params[`o${k}`] = books.outcome[i];
    return `(ts = epoch_ms($t${k}::BIGINT) AND outcome_index = $o${k})`;
  });
  const found = new TapeBooks(
    source
      ? await lake.duck.chunks(
          `SELECT ${TAPE_BOOK_SELECT} FROM (${source}) WHERE market_id = $market_id AND (${wanted.join(' OR ')}) ORDER BY ts, outcome_index`,
          params,
        )
      : [],
  );
  for (const i of rows) {
    // Another walk of the same tape may have read it meanwhile.
    if (books.has(i)) continue;
    let j = found.length - 1;
    while (j >= 0 && (found.ts[j] !== books.ts[i] || found.outcome[j] !== books.outcome[i])) j--;
    if (j < 0) throw new Error(`the book of market ${m.market_id} at ${books.ts[i]} is not in the lake its copy was made from`);
    books.add(i, found, j);
  }
}

/** Renders every message a walk of `tape` can ask for, letting other work in every few milliseconds; false when stopped. */
async function renderAll(venue: Venue, tape: MarketTape, stopped: () => boolean): Promise<boolean> {
  const walk =
    venue === 'polymarket'
      ? new PolymarketWalk(tape, -Infinity, Infinity, false)
      : new WalletWalk(tape, -Infinity, Infinity, WALLET_AGGREGATE_TOPIC);
  const out: string[] = [];
  let slice = performance.now();
  while (walk.next() !== Infinity) {
    if (stopped()) return false;
    walk.take(out);
    out.length = 0;
    if (performance.now() - slice > SLICE_MS) {
      await new Promise((resolve) => setImmediate(resolve));
      slice = performance.now();
    }
  }
  return true;
}

export interface ReplayCopyStats {
  reads: number;
  written: number;
  queued: number;
  failed: number;
}

/**
 * The copies of one lake: read for a replay, written in the background one at a time (for a
 * market replayed without one, and by a sweep over the markets that ended lately). Processes
 * sharing the directory (a cluster's workers) take a market by creating its temporary file.
 */
export class ReplayCopies implements ReplayCopyStore {
  private readonly queue: { venue: Venue; market: StoredMarket; now: number }[] = [];
  private readonly queued = new Set<string>();
  /** Signatures known to have a copy on disk. */
  private readonly present = new Set<string>();
  private draining = false;
  private stopped = false;
  readonly stats: ReplayCopyStats = { reads: 0, written: 0, queued: 0, failed: 0 };

  constructor(
    private readonly dir: string,
    private readonly lake: LakeReader,
    private readonly log: Logger,
  ) {}

  path(venue: Venue, marketId: string, signature: string): string {
    return path.join(this.dir, venue, marketId.slice(-2), `${marketId}.${signature.slice(0, 20)}.v${REPLAY_COPY_VERSION}.replay`);
  }

  /** The market's tape from its copy, or null: none yet, or a damaged one (removed, and written again). */
  async read(venue: Venue, m: StoredMarket, signature: string): Promise<MarketTape | null> {
    const file = this.path(venue, m.market_id, signature);
    const bytes = await fs.readFile(file).catch(() => null);
    if (!bytes) return null;
    try {
      const tape = decodeCopy(bytes, m, signature);
      tape.readHeld = (at) => readHeld(this.lake, venue, tape, at);
      this.stats.reads++;
      this.present.add(signature);
      return tape;
    } catch (err) {
      this.log.warn({ market_id: m.market_id, err: (err as Error).message }, 'replay copy damaged: removed');
      this.present.delete(signature);
      await fs.rm(file, { force: true });
      return null;
    }
  }

  /**
   * A market's tape from its copy; null for a market whose record may still change, or one without
   * a copy yet (which is then written, for the next replay).
   */
  async tape(venue: Venue, m: StoredMarket, now: number): Promise<MarketTape | null> {
    const signature = copySignature(this.lake, venue, m, now);
    if (!signature) return null;
    const tape = await this.read(venue, m, signature);
    if (!tape) this.schedule(venue, m, now);
    return tape;
  }

  /** Writes the market's copy in the background, unless it has one or is waiting for it. */
  schedule(venue: Venue, m: StoredMarket, now: number): void {
    const key = marketKey(venue, m.market_id);
    if (this.stopped || this.queued.has(key)) return;
    const signature = copySignature(this.lake, venue, m, now);
    if (!signature || this.present.has(signature)) return;
    this.queued.add(key);
    this.queue.push({ venue, market: m, now });
    this.stats.queued = this.queue.length;
    void this.drain();
  }

  /**
   * Markets that ended in the last `backMs` (all: Infinity) and are settled, without a copy:
   * scheduled. Run after each lake update with a short reach (capture seals a market at its end,
   * so its copy follows within seconds), and now and then over the last hours.
   */
  sweep(now: number, backMs = SWEEP_BACK_MS): void {
    for (const m of this.lake.walk('desc', now)) {
      // Walked by window start, newest first: a start this old ends well before the span swept.
      if (m.start_time < now - backMs - 24 * 3_600_000) break;
      if (m.end_time > now || m.end_time < now - backMs) continue;
      this.schedule(m.venue, m, now);
    }
  }

  /** Stops writing: what is queued is dropped, a copy being written is abandoned at its next step. */
  async close(): Promise<void> {
    this.stopped = true;
    this.queue.length = 0;
    await this.idle();
  }

  /** Resolves once nothing is queued or being written (for tests and benchmarks). */
  async idle(): Promise<void> {
    while (this.draining || this.queue.length) await new Promise((r) => setTimeout(r, 20));
  }

  private async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.queue.length && !this.stopped) {
        const { venue, market, now } = this.queue.shift()!;
        this.stats.queued = this.queue.length;
        try {
          await this.write(venue, market, now);
        } catch (err) {
          this.stats.failed++;
          this.log.warn({ market_id: market.market_id, err: (err as Error).message }, 'replay copy not written');
        } finally {
          this.queued.delete(marketKey(venue, market.market_id));
        }
      }
    } finally {
      this.draining = false;
    }
  }

  private async write(venue: Venue, m: StoredMarket, now: number): Promise<void> {
    const signature = copySignature(this.lake, venue, m, now);
    if (!signature) return;
    const file = this.path(venue, m.market_id, signature);
    if (await fs.stat(file).catch(() => null)) {
      this.present.add(signature);
      return;
    }
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp`;
    const handle = await fs.open(tmp, 'wx').catch(async (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err;
      // Another process is writing it, or one died doing so.
      const stat = await fs.stat(tmp).catch(() => null);
      if (stat && Date.now() - stat.mtimeMs > STALE_TMP_MS) await fs.rm(tmp, { force: true });
      return null;
    });
    if (!handle) return;
    const began = performance.now();
    let written: { bytes: number; rows: number; messages: number } | null = null;
    try {
      const tape = await loadTape(this.lake, venue, m);
      // The lake may have moved on while the tape was read (a compaction, a gap written late).
      if ((await renderAll(venue, tape, () => this.stopped)) && copySignature(this.lake, venue, m, now) === signature) {
        const bytes = encodeCopy(tape, signature);
        await handle.writeFile(bytes);
        await handle.sync();
        written = { bytes: bytes.length, rows: tape.books.length, messages: tape.rendered.size };
      }
    } finally {
      await handle.close();
      if (!written) await fs.rm(tmp, { force: true });
    }
    if (!written) return;
    await fs.rename(tmp, file);
    // Bounded over months of uptime: forgetting only costs a look at the disk.
    if (this.present.size > 100_000) this.present.clear();
    this.present.add(signature);
    this.stats.written++;
    // Copies of the market's earlier inputs are never read again.
    const mine = path.basename(file);
    for (const name of await fs.readdir(path.dirname(file)))
      if (name.startsWith(`${m.market_id}.`) && name !== mine && !name.endsWith('.tmp'))
        await fs.rm(path.join(path.dirname(file), name), { force: true });
    this.log.debug({ market_id: m.market_id, ...written, ms: Math.round(performance.now() - began) }, 'replay copy written');
  }
}
