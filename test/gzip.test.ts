// Gzip members assembled from raw-deflate pieces (pages/gzip.ts): the CRC-32 combined from the
// pieces' equals zlib's over the whole text, and the member inflates, CRC and length checked, to
// the pieces' texts in order, whether a piece was stored, deflated now or deflated long before.
import crypto from 'node:crypto';
import zlib from 'node:zlib';
import t from 'tap';
import { crc32Combine, freshPiece, gzipMember } from '../src/pages/gzip.js';

t.test('crc32Combine equals the CRC-32 of the concatenation', async (t) => {
  const lengths = [0, 1, 3, 255, 256, 4096, 65_535, 65_536, 1_000_003];
  let checked = 0;
  for (const a of lengths)
    for (const b of lengths) {
      const [x, y] = [crypto.randomBytes(a), crypto.randomBytes(b)];
      if (crc32Combine(zlib.crc32(x), zlib.crc32(y), b) !== zlib.crc32(Buffer.concat([x, y]))) t.fail(`${a} + ${b}`);
      else checked++;
    }
  t.equal(checked, lengths.length ** 2);
});

t.test('a member of pieces stored, deflated now and deflated before inflates to their texts', async (t) => {
  const texts = [
    Buffer.from('{"data":'),
    Buffer.alloc(0),
    Buffer.from('[1,2,3],'.repeat(20_000)),
    crypto.randomBytes(150_000), // stored blocks split at 64 KiB when deflate cannot shrink it
    Buffer.from('x'.repeat(600)),
    Buffer.from('}'),
  ];
  const before = deflatedBefore(texts[2]);
  const pieces = [freshPiece(texts[0]), freshPiece(texts[1]), before, freshPiece(texts[3]), freshPiece(texts[4], 9), freshPiece(texts[5])];
  const member = gzipMember(pieces);
  t.ok(zlib.gunzipSync(member).equals(Buffer.concat(texts)), 'inflates to the texts in order');
  t.equal(member.readUInt32LE(member.length - 4), Buffer.concat(texts).length, 'ISIZE');
  t.ok(freshPiece(texts[0]).deflated.length === texts[0].length + 5, 'a short text goes stored');
  const damaged = Buffer.from(member);
  damaged[member.length - 8] ^= 1;
  t.throws(() => zlib.gunzipSync(damaged), 'a wrong CRC is caught by the reader');
});

function deflatedBefore(text: Buffer) {
  return {
    deflated: zlib.deflateRawSync(text, { level: 6, finishFlush: zlib.constants.Z_SYNC_FLUSH }),
    crc: zlib.crc32(text),
    length: text.length,
  };
}
