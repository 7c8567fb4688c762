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
import { promisify } from 'node:util';
import { crc32, deflateRaw, inflateRawSync } from 'node:zlib';
import type { Venue } from '../config.js';
import type { LakeReader, StoredMarket } from '../lake/reader.js';
import type { Logger } from '../log.js';
import { PolymarketWalk } from './polymarket.js';
import {
  type MarketTape,
  type RenderedMessages,
  type ReplayCopyStore,
  type TapeGap,
  TapeBooks,
  loadTape,
  settledRows,
  tapeGaps,
} from './tape.js';
import { WALLET_AGGREGATE_TOPIC, WalletWalk } from './wallet.js';
import { marketKey } from '../records.js';
import type { CopyBudget } from './copybudget.js';

/** Bumped when the rendering or the layout changes: older copies are then simply not found. */
export const REPLAY_COPY_VERSION = 4;
const MAGIC = Buffer.from('PMREPLAY', 'latin1');
const PREFIX = MAGIC.length + 8;
/** How far back a sweep looks for markets without a copy; older ones get theirs when replayed (twice, under a budget). */
const SWEEP_BACK_MS = 6 * 3_600_000;
/** Markets replayed once without a copy remembered (a second replay writes it, under a budget). */
const MISSES_KEPT = 50_000;
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

/**
 * Messages' text, and ladders' bytes, per block before deflate: a replay's start inflates the
 * block of its first message and those of the books it sends first, not the market's whole record.
 */
const MESSAGE_BLOCK = 64 * 1024;
const LADDER_BLOCK = 64 * 1024;
/** Written once per market, in the background: the smallest deflate, inflated as fast as any. */
const DEFLATE = { level: 6 };
/** On the threadpool: a large market's deflate would hold every replay of the process for its whole time. */
const deflate = (bytes: Buffer) => promisify(deflateRaw)(bytes, DEFLATE);

interface Header {
  version: number;
  market_id: string;
  signature: string;
  rows: number;
  trades: number;
  keys: number;
  messageBlocks: number;
  ladderBlocks: number;
  /** Whether the ladders are kept: only a walk that renders books at its start reads them (see `walkReadsLadders`). */
  ladders: boolean;
  /** The table's bytes inflated; the messages' text; the ladders' values (8 bytes each). */
  table: number;
  text: number;
  levels: number;
  /** The three parts as stored (raw deflate). */
  packed: [table: number, messages: number, ladders: number];
  ticks: { ts: number; tick: number }[];
  gaps: (Omit<TapeGap, 'to'> & { to: number | null })[];
  fieldTexts: string[];
  levelTexts: [number, string][];
  venueHashes: [number, string][];
}

/**
 * The table's sections, each at a multiple of 8 so typed arrays can view them: what a walk reads of
 * the rows (times, outcomes, the venue's times, ladder lengths, hashed fields and text codes) and of
 * the trades (times, prices, outcomes), the rendered keys and their offsets into the text, and each
 * block's first key (or row) and offset into its part as stored.
 */
function tableLayout(h: Pick<Header, 'rows' | 'trades' | 'keys' | 'messageBlocks' | 'ladderBlocks'>) {
  const { rows: n, trades: t, keys: k, messageBlocks: mb, ladderBlocks: lb } = h;
  const sizes = {
    ts: 8 * n,
    exchange: 8 * n,
    tradeTs: 8 * t,
    tradePrice: 8 * t,
    outcome: 4 * n,
    bids: 4 * n,
    asks: 4 * n,
    fields: 4 * n,
    tradeOutcome: 4 * t,
    keys: 4 * k,
    offsets: 4 * (k + 1),
    messageFirst: 4 * (mb + 1),
    messageAt: 4 * (mb + 1),
    ladderFirst: 4 * (lb + 1),
    ladderAt: 4 * (lb + 1),
    priceDecimals: n,
    sizeDecimals: n,
    hashed: n,
  };
  const at = {} as Record<keyof typeof sizes, number>;
  let length = 0;
  for (const [name, size] of Object.entries(sizes) as [keyof typeof sizes, number][]) {
    at[name] = length;
    length += Math.ceil(size / 8) * 8;
  }
  return { at, length };
}

/** Consecutive pieces cut where each block reaches `size` bytes, each block deflated on its own. */
async function blocks(pieces: number, bytesOf: (i: number) => Buffer, size: number) {
  const first = [0];
  const at = [0];
  const packed: Buffer[] = [];
  let run: Buffer[] = [];
  let length = 0;
  let bytes = 0;
  const cut = async (next: number) => {
    packed.push(await deflate(Buffer.concat(run)));
    at.push(at[at.length - 1] + packed[packed.length - 1].length);
    first.push(next);
    run = [];
    length = 0;
  };
  for (let i = 0; i < pieces; i++) {
    const b = bytesOf(i);
    run.push(b);
    length += b.length;
    bytes += b.length;
    if (length >= size) await cut(i + 1);
  }
  if (run.length || pieces === 0) await cut(pieces);
  return { first: Uint32Array.from(first), at: Uint32Array.from(at), data: Buffer.concat(packed), bytes };
}

const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/**
 * Whether a venue's walk reads a copied tape's ladders: Polymarket's renders the books it sends at a
 * start (a `book` message, hashed) from them; the wallet's sends every book as a rendered payload,
 * the one at a start too, so its copy keeps none (they were half of its bytes).
 */
export const walkReadsLadders = (venue: Venue) => venue === 'polymarket';

/** The file of a tape whose every message is rendered (`rendered` a map, as a full walk leaves it). */
export async function encodeCopy(tape: MarketTape, signature: string, withLadders: boolean): Promise<Buffer> {
  const rendered = tape.rendered as Map<number, string>;
  const keys = Int32Array.from([...rendered.keys()].sort((a, b) => a - b));
  const texts = [...keys].map((k) => Buffer.from(rendered.get(k)!, 'utf8'));
  const offsets = new Uint32Array(keys.length + 1);
  texts.forEach((t, i) => (offsets[i + 1] = offsets[i] + t.length));
  const messages = await blocks(keys.length, (i) => texts[i], MESSAGE_BLOCK);
  const { books, trades } = tape;
  const n = books.length;
  const ladderOf = (i: number) => books.levels.subarray(books.at[i], books.at[i] + 2 * (books.bids[i] + books.asks[i]));
  const ladders = withLadders
    ? await blocks(n, (i) => bytesOf(ladderOf(i)), LADDER_BLOCK)
    : { first: Uint32Array.of(0), at: Uint32Array.of(0), data: Buffer.alloc(0), bytes: 0 };
  const shape = {
    rows: n,
    trades: trades.length,
    keys: keys.length,
    messageBlocks: messages.first.length - 1,
    ladderBlocks: ladders.first.length - 1,
  };
  const layout = tableLayout(shape);
  const table = Buffer.alloc(layout.length);
  const columns: Record<keyof typeof layout.at, ArrayBufferView> = {
    ts: books.ts,
    exchange: books.exchange,
    tradeTs: Float64Array.from(trades, (t) => t.ts),
    tradePrice: Float64Array.from(trades, (t) => t.price),
    outcome: books.outcome,
    bids: books.bids,
    asks: books.asks,
    fields: books.fields,
    tradeOutcome: Int32Array.from(trades, (t) => t.outcome),
    keys,
    offsets,
    messageFirst: messages.first,
    messageAt: messages.at,
    ladderFirst: ladders.first,
    ladderAt: ladders.at,
    priceDecimals: books.priceDecimals,
    sizeDecimals: books.sizeDecimals,
    hashed: books.hashed,
  };
  for (const [name, column] of Object.entries(columns)) bytesOf(column).copy(table, layout.at[name as keyof typeof columns]);
  const packedTable = await deflate(table);
  const header: Header = {
    version: REPLAY_COPY_VERSION,
    market_id: tape.market.market_id,
    signature,
    ...shape,
    ladders: withLadders,
    table: table.length,
    text: offsets[keys.length],
    levels: ladders.bytes / 8,
    packed: [packedTable.length, messages.data.length, ladders.data.length],
    ticks: tape.ticks,
    gaps: tape.gaps.map((g) => ({ ...g, to: Number.isFinite(g.to) ? g.to : null })),
    // Each row's `fields` indexes these; decoding adds them in this order, so the indexes hold.
    fieldTexts: books.fieldTexts,
    levelTexts: [...books.levelTexts],
    venueHashes: [...books.venueHashes],
  };
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  // The prefix: the magic, the header's length and the crc32 of everything after the prefix (header and parts).
  const prefix = Buffer.alloc(PREFIX);
  MAGIC.copy(prefix, 0);
  prefix.writeUInt32LE(head.length, MAGIC.length);
  prefix.writeUInt32LE(crc32(ladders.data, crc32(messages.data, crc32(packedTable, crc32(head)))), MAGIC.length + 4);
  return Buffer.concat([prefix, head, packedTable, messages.data, ladders.data]);
}

/** `bytes` where typed arrays can view them from offset 0 (an inflated buffer may be a slice of a pool). */
function aligned(bytes: Buffer): Buffer {
  if (bytes.byteOffset % 8 === 0) return bytes;
  const own = new Uint8Array(bytes.length);
  own.set(bytes);
  return Buffer.from(own.buffer);
}

/** Inflates block b of a part (`at` as `blocks` made it) and checks it holds `length` bytes. */
function inflateBlock(data: Buffer, at: Uint32Array, b: number, length: number): Buffer {
  // Its length known: inflated into one buffer, not in 16 KiB pieces joined after.
  const bytes = inflateRawSync(data.subarray(at[b], at[b + 1]), { chunkSize: Math.max(64, length) });
  if (bytes.length !== length) throw new Error(`a replay copy whose block ${b} inflates to ${bytes.length} bytes, not ${length}`);
  return bytes;
}

/** The block of a part holding piece i: the one at `hint` when it does, else found by halving. */
function blockOf(first: Uint32Array, i: number, hint: number): number {
  if (hint >= 0 && first[hint] <= i && i < first[hint + 1]) return hint;
  let lo = 0;
  let hi = first.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (first[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/**
 * Messages of a copy by key, cut from their block's text when asked for (a walk asks in key order);
 * a block is inflated the first time one of its messages is, and kept with the tape.
 */
class CopiedMessages implements RenderedMessages {
  private last = -1;
  private block = -1;
  private readonly texts: (Buffer | undefined)[];

  constructor(
    private readonly keys: Int32Array,
    private readonly offsets: Uint32Array,
    private readonly first: Uint32Array,
    private readonly at: Uint32Array,
    private readonly data: Buffer,
  ) {
    this.texts = new Array<Buffer | undefined>(first.length - 1);
  }

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
    const b = (this.block = blockOf(this.first, i, this.block));
    const base = this.offsets[this.first[b]];
    const text = (this.texts[b] ??= inflateBlock(this.data, this.at, b, this.offsets[this.first[b + 1]] - base));
    return text.toString('utf8', this.offsets[i] - base, this.offsets[i + 1] - base);
  }

  set(): void {
    throw new Error('a replay copy holds every message already');
  }
}

/**
 * A copy's header and where its packed parts start; throws on bytes that are not a replay copy and,
 * when `whole`, on any byte changed (checked before anything is read, so a changed hash in the header
 * or a block is never played).
 */
function readHeader(bytes: Buffer, whole: boolean): { header: Header; start: number } {
  if (bytes.length < PREFIX || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) throw new Error('not a replay copy');
  if (whole && crc32(bytes.subarray(PREFIX)) !== bytes.readUInt32LE(MAGIC.length + 4))
    throw new Error('a replay copy whose bytes do not match their crc32');
  const start = PREFIX + bytes.readUInt32LE(MAGIC.length);
  return { header: JSON.parse(bytes.toString('utf8', PREFIX, start)) as Header, start };
}

/** What a copy holds, by its header alone (no check of the parts): for reports of its bytes. */
export function copyContents(bytes: Buffer): { rows: number; ladders: boolean; packed: Header['packed'] } {
  const { header } = readHeader(bytes, false);
  return { rows: header.rows, ladders: header.ladders, packed: header.packed };
}

/** A market's tape from its copy's bytes; throws when they are not a whole copy of `signature`. */
export function decodeCopy(bytes: Buffer, m: StoredMarket, signature: string): MarketTape {
  const { header, start } = readHeader(bytes, true);
  if (header.version !== REPLAY_COPY_VERSION || header.signature !== signature || header.market_id !== m.market_id)
    throw new Error('a replay copy of other inputs');
  const [packedTable, packedMessages, packedLadders] = header.packed;
  const length = start + packedTable + packedMessages + packedLadders;
  if (bytes.length !== length) throw new Error(`a replay copy of ${bytes.length} bytes, not ${length}`);
  const packed = bytes.subarray(start);
  const layout = tableLayout(header);
  const table = aligned(inflateRawSync(packed.subarray(0, packedTable), { chunkSize: Math.max(64, layout.length) }));
  if (table.length !== header.table || table.length !== layout.length)
    throw new Error('a replay copy whose table does not inflate to its length');
  const view = <T>(Type: new (b: ArrayBufferLike, o: number, n: number) => T, name: keyof typeof layout.at, n: number) =>
    new Type(table.buffer, table.byteOffset + layout.at[name], n);
  const { rows, trades: t, keys: k, messageBlocks: mb, ladderBlocks: lb } = header;
  const offsets = view(Uint32Array, 'offsets', k + 1);
  const messageFirst = view(Uint32Array, 'messageFirst', mb + 1);
  const messageAt = view(Uint32Array, 'messageAt', mb + 1);
  const ladderFirst = view(Uint32Array, 'ladderFirst', lb + 1);
  const ladderAt = view(Uint32Array, 'ladderAt', lb + 1);
  if (offsets[k] !== header.text) throw new Error('a replay copy whose offsets do not end at its messages');
  const laddered = header.ladders ? rows : 0;
  if (messageFirst[mb] !== k || ladderFirst[lb] !== laddered || messageAt[mb] !== packedMessages || ladderAt[lb] !== packedLadders)
    throw new Error('a replay copy whose blocks do not end at its parts');
  const tradeTs = view(Float64Array, 'tradeTs', t);
  const tradePrice = view(Float64Array, 'tradePrice', t);
  const tradeOutcome = view(Int32Array, 'tradeOutcome', t);
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
  // Copied out of the file's bytes (the header and the table are not kept): what stays is inflated as a walk asks.
  const lazy = Buffer.from(packed.subarray(packedTable));
  const messages = lazy.subarray(0, packedMessages);
  const ladderData = lazy.subarray(packedMessages);
  const bids = view(Int32Array, 'bids', rows);
  const asks = view(Int32Array, 'asks', rows);
  let levels = 0;
  for (let r = 0; r < laddered; r++) levels += 2 * (bids[r] + asks[r]);
  if (levels !== header.levels) throw new Error('a replay copy whose ladders do not add up to its levels');
  const books = TapeBooks.copied(
    {
      ts: view(Float64Array, 'ts', rows),
      outcome: view(Int32Array, 'outcome', rows),
      bids,
      asks,
      exchange: view(Float64Array, 'exchange', rows),
      priceDecimals: view(Int8Array, 'priceDecimals', rows),
      sizeDecimals: view(Int8Array, 'sizeDecimals', rows),
      hashed: view(Uint8Array, 'hashed', rows),
      fields: view(Int32Array, 'fields', rows),
    },
    header.fieldTexts,
    header.levelTexts,
    header.venueHashes,
    (i) => {
      if (!header.ladders) throw new Error(`a replay copy of market ${m.market_id} keeps no ladders`);
      const b = blockOf(ladderFirst, i, -1);
      const [from, to] = [ladderFirst[b], ladderFirst[b + 1]];
      let length = 0;
      for (let r = from; r < to; r++) length += 2 * (bids[r] + asks[r]);
      const values = aligned(inflateBlock(ladderData, ladderAt, b, 8 * length));
      return { from, to, values: new Float64Array(values.buffer, values.byteOffset, length) };
    },
  );
  return {
    market: m,
    books,
    trades,
    ticks: header.ticks,
    gaps: header.gaps.map((g) => ({ ...g, to: g.to ?? Infinity })),
    // What it holds once every block is inflated, the blocks as stored, and the rows' texts and hashes kept aside.
    bytes:
      200 +
      header.text +
      8 * header.levels +
      table.length +
      lazy.length +
      80 * t +
      120 * (header.levelTexts.length + header.venueHashes.length + header.fieldTexts.length),
    rendered: new CopiedMessages(view(Int32Array, 'keys', k), offsets, messageFirst, messageAt, messages),
    copied: true,
  };
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
 * Under a budget (copybudget.ts), a copy ranks by its last read (its market's end until then):
 * the sweep's copies of markets that just ended, and those of markets replayed twice, push out
 * the copies read longest ago; a market replayed once is not worth a copy's write.
 */
export class ReplayCopies implements ReplayCopyStore {
  private readonly queue: { venue: Venue; market: StoredMarket; now: number; rank: number }[] = [];
  /** Signatures of markets replayed without a copy, once. */
  private readonly missed = new Set<string>();
  /** Signatures whose copy was written and at once removed for want of room. */
  private readonly unfit = new Set<string>();
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
    readonly budget: CopyBudget | null = null,
  ) {}

  path(venue: Venue, marketId: string, signature: string): string {
    return path.join(this.dir, venue, marketId.slice(-2), `${marketId}.${signature.slice(0, 20)}.v${REPLAY_COPY_VERSION}.replay`);
  }

  /** The market's tape from its copy, or null: none yet, or a damaged one (removed, and written again). */
  async read(venue: Venue, m: StoredMarket, signature: string, now: number): Promise<MarketTape | null> {
    const file = this.path(venue, m.market_id, signature);
    const bytes = await fs.readFile(file).catch(() => null);
    if (!bytes) {
      // Evicted (or never written): the next write must look at the disk again.
      this.present.delete(signature);
      return null;
    }
    try {
      const tape = decodeCopy(bytes, m, signature);
      this.stats.reads++;
      this.present.add(signature);
      await this.budget?.read(file, now);
      return tape;
    } catch (err) {
      this.log.warn({ market_id: m.market_id, err: (err as Error).message }, 'replay copy damaged: removed');
      this.present.delete(signature);
      await fs.rm(file, { force: true });
      this.budget?.removed(file);
      // It had earned its place: written again at once.
      this.missed.add(signature);
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
    const tape = await this.read(venue, m, signature, now);
    if (tape) return tape;
    if (!this.budget?.bounded || this.missed.has(signature)) {
      this.missed.delete(signature);
      // Ranked by this read now, it may fit where its market's end did not.
      this.unfit.delete(signature);
      this.schedule(venue, m, now, now);
    } else {
      if (this.missed.size >= MISSES_KEPT) this.missed.clear();
      this.missed.add(signature);
    }
    return null;
  }

  /**
   * Writes the market's copy in the background, unless it has one or is waiting for it; ranked
   * `rank` against the others under a budget (when it was read, or when its market ended).
   */
  schedule(venue: Venue, m: StoredMarket, now: number, rank: number): void {
    const key = marketKey(venue, m.market_id);
    if (this.stopped || this.queued.has(key)) return;
    const signature = copySignature(this.lake, venue, m, now);
    if (!signature || this.present.has(signature) || this.unfit.has(signature)) return;
    this.queued.add(key);
    this.queue.push({ venue, market: m, now, rank });
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
      this.schedule(m.venue, m, now, m.end_time);
    }
  }

  /** Brings the copies within their budget (at start, and after each sweep: serving copies grow at every seal). */
  async settle(): Promise<void> {
    await this.budget?.settle();
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
        const { venue, market, now, rank } = this.queue.shift()!;
        this.stats.queued = this.queue.length;
        try {
          await this.write(venue, market, now, rank);
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

  private async write(venue: Venue, m: StoredMarket, now: number, rank: number): Promise<void> {
    const signature = copySignature(this.lake, venue, m, now);
    if (!signature) return;
    const file = this.path(venue, m.market_id, signature);
    if (await fs.stat(file).catch(() => null)) {
      this.present.add(signature);
      return;
    }
    if (this.budget && !(await this.budget.admits(rank))) return;
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
        const bytes = await encodeCopy(tape, signature, walkReadsLadders(venue));
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
    if (this.unfit.size > MISSES_KEPT) this.unfit.clear();
    this.present.add(signature);
    this.stats.written++;
    // Copies of the market's earlier inputs are never read again.
    const mine = path.basename(file);
    for (const name of await fs.readdir(path.dirname(file)))
      if (name.startsWith(`${m.market_id}.`) && name !== mine && !name.endsWith('.tmp')) {
        await fs.rm(path.join(path.dirname(file), name), { force: true });
        this.budget?.removed(path.join(path.dirname(file), name));
      }
    // Outranked by every copy kept (the room guessed wrong): not tried again by this process.
    if (this.budget && !(await this.budget.added(file, written.bytes, rank))) this.unfit.add(signature);
    this.log.debug({ market_id: m.market_id, ...written, ms: Math.round(performance.now() - began) }, 'replay copy written');
  }
}
