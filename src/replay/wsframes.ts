// Text frames of a WebSocket server (RFC 6455 section 5.2: FIN, opcode 1, no mask, the payload's
// length in 7, 16 or 64 bits), many in one buffer. A replay of the wallet's feed sends a frame per
// message, 300,000 a second; through `ws`'s sender each is a header buffer, the text encoded
// again, and two writes queued on the socket: most of a message's cost, and garbage. Only for a
// connection without extensions (the replay server negotiates none), written between `ws`'s own
// frames, never inside one.

/** The frames of `texts`, one after another, as one buffer. */
export function textFrames(texts: readonly string[]): Buffer {
  const lengths = texts.map((t) => Buffer.byteLength(t));
  let size = 0;
  for (const n of lengths) size += headerLength(n) + n;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  texts.forEach((text, i) => {
    const n = lengths[i];
    out[at] = 0x81;
    if (n < 126) {
      out[at + 1] = n;
      at += 2;
    } else if (n < 65536) {
      out[at + 1] = 126;
      out.writeUInt16BE(n, at + 2);
      at += 4;
    } else {
      out[at + 1] = 127;
      out.writeBigUInt64BE(BigInt(n), at + 2);
      at += 10;
    }
    at += out.write(text, at, 'utf8');
  });
  return out;
}

function headerLength(n: number): number {
  return n < 126 ? 2 : n < 65536 ? 4 : 10;
}
