// Memory a page reads into, reused from page to page.

/**
 * Memory a page reads into, reused from page to page: fresh buffers of a few hundred KiB a page
 * kept the garbage collector busy a third of a worker's time under load (a CPU profile of the
 * cache-off bench, p90 11 ms against a p50 of 1 ms). Bump-allocated, 8-aligned; a page larger
 * than an arena gets ordinary buffers.
 */
export class Arena {
  private static readonly free: Arena[] = [];
  private static readonly BYTES = 4 << 20;
  private used = 0;
  private constructor(private readonly buffer: Buffer) {}

  static take(): Arena {
    const arena = Arena.free.pop() ?? new Arena(Buffer.allocUnsafeSlow(Arena.BYTES));
    arena.used = 0;
    return arena;
  }

  static give(arena: Arena): void {
    if (Arena.free.length < 16) Arena.free.push(arena);
  }

  bytes(length: number): Buffer {
    const at = (this.used + 7) & ~7;
    if (at + length > this.buffer.length) return Buffer.allocUnsafeSlow(length);
    this.used = at + length;
    return this.buffer.subarray(at, at + length);
  }

  doubles(n: number): Float64Array {
    const b = this.bytes(8 * n);
    return new Float64Array(b.buffer, b.byteOffset, n);
  }

  ints(n: number): Int32Array {
    const b = this.bytes(4 * n);
    return new Int32Array(b.buffer, b.byteOffset, n);
  }

  uints(n: number): Uint32Array {
    const b = this.bytes(4 * n);
    return new Uint32Array(b.buffer, b.byteOffset, n);
  }
}
