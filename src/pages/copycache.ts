// What pages read from serving copies, kept: each block's table and the chunks' text as inflated,
// in one buffer written round and round. A page whose pieces are here opens no file and inflates
// nothing. Keeping a piece is a copy of what the page inflated anyway (tens of microseconds), and
// nothing is allocated per piece: a cache of decoded whole markets cost more than it saved on
// markets drawn uniformly (each load decoded a market to serve a few pages of it; bench-compare,
// deep pages at 4 connections 0.36x the req/s of no cache), and fresh buffers per page kept the
// garbage collector busy (arena.ts). Oldest out first: a piece read again after the ring has come
// round is simply inflated again. Only blocks asked for again while the ring could still hold them
// are kept: under markets drawn uniformly over more than it holds, keeping every page's pieces
// cost 8-25% of the pages' rate and no page ever found one (first pages over the 7-day bench lake).

import { constants } from 'node:buffer';

const { MAX_LENGTH } = constants;

interface Piece {
  /** Where it starts, in bytes ever written: it is intact while the writer has not come round to it. */
  at: number;
  length: number;
  /** Numbers the piece's reader needs to use it (a table's row and chunk counts). */
  meta: readonly number[];
}

export class CopyCache {
  private ring: Buffer | null = null;
  private refused = false;
  private written = 0;
  /** In the order written (a piece kept again moves to the end), so the front is the first overwritten. */
  private readonly pieces = new Map<string, Piece>();
  /** Blocks asked for lately, most recent last: as many as the ring holds of blocks. */
  private readonly asked = new Map<string, true>();
  private keptBytes = 0;
  /** Blocks whose table was kept: with keptBytes, what a block takes of the ring. */
  private blocks = 0;
  hits = 0;
  kept = 0;

  readonly maxBytes: number;

  constructor(maxBytes: number) {
    this.maxBytes = Math.floor(Math.min(maxBytes, MAX_LENGTH) / 8) * 8;
  }

  get bytes(): number {
    return Math.min(this.written, this.maxBytes);
  }

  /**
   * Notes that a page reads block `key`, and whether its pieces are worth keeping: it was asked for
   * before, and fewer blocks since than the ring holds (their average size measured as kept). A
   * block asked for once, or again only after the ring would have come round, costs nothing here.
   */
  admit(key: string): boolean {
    if (this.maxBytes === 0) return false;
    const again = this.asked.delete(key);
    this.asked.set(key, true);
    const perBlock = this.blocks ? this.keptBytes / this.blocks : 64 * 1024;
    const held = Math.max(16, Math.floor(this.maxBytes / perBlock));
    for (const k of this.asked.keys()) {
      if (this.asked.size <= held) break;
      this.asked.delete(k);
    }
    return again;
  }

  /**
   * The bytes kept under `key`, or null. A view of the ring: valid only until the next `keep`,
   * so it is to be used before the caller awaits anything.
   */
  get(key: string): { bytes: Buffer; meta: readonly number[] } | null {
    const piece = this.pieces.get(key);
    if (!piece) return null;
    if (!this.intact(piece)) {
      this.pieces.delete(key);
      return null;
    }
    this.hits++;
    const start = piece.at % this.maxBytes;
    return { bytes: this.ring!.subarray(start, start + piece.length), meta: piece.meta };
  }

  /** Keeps `parts` (concatenated) under `key` (`table`: a block's table, the first of its pieces); nothing larger than a quarter of the ring. */
  keep(key: string, parts: readonly Uint8Array[], meta: readonly number[] = [], table = false): void {
    let length = 0;
    for (const p of parts) length += p.byteLength;
    const ring = length === 0 || length > this.maxBytes / 4 ? null : this.allocated();
    if (!ring) return;
    // 8-aligned (the ring's size is a multiple of 8), so a table copied out keeps its doubles aligned; never across the ring's end.
    let at = Math.ceil(this.written / 8) * 8;
    if ((at % this.maxBytes) + length > this.maxBytes) at += this.maxBytes - (at % this.maxBytes);
    this.written = at + length;
    let w = at % this.maxBytes;
    for (const p of parts) {
      ring.set(p, w);
      w += p.byteLength;
    }
    this.pieces.delete(key);
    this.pieces.set(key, { at, length, meta });
    this.kept++;
    this.keptBytes += length;
    if (table) this.blocks++;
    // Forget what the writer has come round to: the map stays as small as the ring.
    for (const [k, piece] of this.pieces) {
      if (this.intact(piece)) break;
      this.pieces.delete(k);
    }
  }

  /** The ring, allocated at the first piece; a failure (more than the machine gives) leaves a cache that keeps nothing, never a page's error. */
  private allocated(): Buffer | null {
    if (this.ring === null && !this.refused) {
      try {
        this.ring = Buffer.allocUnsafeSlow(this.maxBytes);
      } catch {
        this.refused = true;
      }
    }
    return this.ring;
  }

  private intact(piece: Piece): boolean {
    return piece.at + this.maxBytes >= this.written;
  }
}
