// A gzip member assembled from raw-deflate pieces made at different times: stretches of a page
// deflated once, when its serving copy was written, and the few bytes around them (the envelope,
// a page's edges) per request. Each piece is a deflate stream of its own ended by a sync flush:
// byte-aligned, no final block, no reference to another piece, so pieces concatenate. The
// member's CRC-32 is combined from the pieces' (zlib's crc32_combine), so a stored stretch is
// sent as it is, never inflated or read as text.
import zlib from 'node:zlib';

export interface DeflatedPiece {
  /** Raw deflate, byte-aligned, without a final block. */
  deflated: Buffer;
  /** CRC-32 and length of the text it inflates to. */
  crc: number;
  length: number;
}

const POLY = 0xedb88320;

/** a(x) * b(x) modulo the CRC-32 polynomial, both bit-reflected as zlib keeps them. */
function multmodp(a: number, b: number): number {
  if (a === 0) return 0;
  let m = 0x80000000;
  let p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) === 0) break;
    }
    m >>>= 1;
    b = b & 1 ? (b >>> 1) ^ POLY : b >>> 1;
  }
  return p >>> 0;
}

/** x^(2^k) modulo the polynomial, k = 0..31. */
const X2N: number[] = [0x40000000];
for (let k = 1; k < 32; k++) X2N.push(multmodp(X2N[k - 1], X2N[k - 1]));

/** x^(n * 2^k) modulo the polynomial. */
function x2nmodp(n: number, k: number): number {
  let p = 0x80000000;
  while (n) {
    if (n & 1) p = multmodp(X2N[k & 31], p);
    n = Math.floor(n / 2);
    k++;
  }
  return p;
}

/** The CRC-32 of A followed by B, from A's CRC, B's CRC and B's length. */
export function crc32Combine(crcA: number, crcB: number, lengthB: number): number {
  return (multmodp(x2nmodp(lengthB, 3), crcA) ^ crcB) >>> 0;
}

/** Text below this is sent stored: a zlib stream costs more than the bytes it would save. */
const STORED_BELOW = 512;
const STORED_MAX = 0xffff;

/** `text` as stored deflate blocks (no compression), byte-aligned, not final. */
function stored(text: Buffer): Buffer {
  const blocks: Buffer[] = [];
  for (let at = 0; at < text.length; at += STORED_MAX) {
    const part = text.subarray(at, at + STORED_MAX);
    const head = Buffer.alloc(5);
    head.writeUInt16LE(part.length, 1);
    head.writeUInt16LE(~part.length & 0xffff, 3);
    blocks.push(head, part);
  }
  return Buffer.concat(blocks);
}

/** A piece of text made now: stored when short, else deflated at `level`. */
export function freshPiece(text: Buffer, level = 1): DeflatedPiece {
  const deflated =
    text.length < STORED_BELOW ? stored(text) : zlib.deflateRawSync(text, { level, finishFlush: zlib.constants.Z_SYNC_FLUSH });
  return { deflated, crc: zlib.crc32(text), length: text.length };
}

const HEADER = Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
/** An empty stored block with BFINAL set: ends the deflate stream on a byte boundary. */
const FINAL = Buffer.from([1, 0, 0, 0xff, 0xff]);

/** One gzip member (RFC 1952) holding the pieces' texts one after another. */
export function gzipMember(pieces: readonly DeflatedPiece[]): Buffer {
  let crc = 0;
  let length = 0;
  for (const p of pieces) {
    crc = crc32Combine(crc, p.crc, p.length);
    length += p.length;
  }
  const trailer = Buffer.alloc(8);
  trailer.writeUInt32LE(crc, 0);
  trailer.writeUInt32LE(length % 2 ** 32, 4);
  return Buffer.concat([HEADER, ...pieces.map((p) => p.deflated), FINAL, trailer]);
}
