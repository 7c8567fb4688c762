// One DuckDB instance per process. Connections run one statement at a time, so each is
// wrapped in a lane (a queue); callers never share a connection's state by accident.
// A statement run through `duck.for(signal)` is skipped if the signal fired while it waited,
// and interrupted if it fires while it runs: a client that left stops its query. (Passed
// explicitly: AsyncLocalStorage on Node 20 turns on promise hooks for every promise, about a
// tenth of a small request's time.)
import { type DuckDBDataChunk, DuckDBInstance, type DuckDBConnection, type DuckDBType, type DuckDBValue } from '@duckdb/node-api';

export type Params = Record<string, DuckDBValue>;
export type ParamTypes = Record<string, DuckDBType>;
export type JsonRow = Record<string, unknown>;

/**
 * A failed statement, with DuckDB's error type (the `IO` of "IO Error: ..."). Callers decide on
 * the type, not on the wording of a message.
 */
export class DuckError extends Error {
  override name = 'DuckError';
  constructor(
    readonly type: string,
    message: string,
    options?: { cause: unknown },
  ) {
    super(message, options);
  }

  static from(err: unknown): unknown {
    if (!(err instanceof Error) || err instanceof DuckError) return err;
    const m = /^([A-Za-z ]+) Error: /.exec(err.message);
    return m ? new DuckError(m[1], err.message, { cause: err }) : err;
  }

  /**
   * A lake file missing, unreadable or not Parquet (or the disk failing under a COPY): the lake,
   * not the statement, is at fault, and a retry later may succeed.
   */
  get unreadable(): boolean {
    return this.type === 'IO' || (this.type === 'Invalid Input' && /parquet|magic bytes|file/i.test(this.message));
  }
}

export class Lane {
  private tail: Promise<unknown> = Promise.resolve();
  /** Statements queued or running: the least busy lane takes the next one. */
  pending = 0;
  constructor(readonly connection: DuckDBConnection) {}

  /** Resolves once every statement queued so far has ended. */
  idle(): Promise<unknown> {
    return this.tail;
  }

  private closed = false;

  /** After this, a statement is refused here instead of reaching a connection DuckDB has freed. */
  close(): void {
    this.closed = true;
    this.connection.closeSync();
  }

  run<T>(task: (c: DuckDBConnection) => Promise<T>, signal?: AbortSignal): Promise<T> {
    if (this.closed) return Promise.reject(new DuckError('Connection', 'the DuckDB instance is closed'));
    this.pending++;
    const result = this.tail
      .then(async () => {
        signal?.throwIfAborted();
        const interrupt = () => this.connection.interrupt();
        signal?.addEventListener('abort', interrupt, { once: true });
        try {
          return await task(this.connection);
        } catch (err) {
          throw DuckError.from(err);
        } finally {
          signal?.removeEventListener('abort', interrupt);
        }
      })
      .finally(() => {
        this.pending--;
      });
    this.tail = result.catch(() => undefined);
    return result;
  }
}

export class Duck {
  private constructor(
    private readonly instance: DuckDBInstance,
    private readonly lanes: Lane[],
    /** Every lane of the instance, forks' included: what `shutdown` waits for. */
    private readonly all: Set<Lane>,
    private readonly signal?: AbortSignal,
  ) {}

  /** The same lanes, with every statement cancelled when `signal` fires (a request whose client left). */
  for(signal: AbortSignal): Duck {
    return new Duck(this.instance, this.lanes, this.all, signal);
  }

  static async open(lanes = 2, options: Record<string, string> = {}): Promise<Duck> {
    const instance = await DuckDBInstance.create(':memory:', { threads: '2', ...options });
    const duck = await new Duck(instance, [], new Set()).fork(lanes);
    // Footers are read once per file instead of once per query.
    await duck.run('SET GLOBAL parquet_metadata_cache = true');
    // Lake times are TIMESTAMPTZ: casts, comparisons and strftime are in UTC whatever the
    // machine's zone.
    await duck.run("SET GLOBAL TimeZone = 'UTC'");
    return duck;
  }

  /**
   * Other lanes over the same instance (same settings and caches): a job whose statements run
   * long (sealing an hour, an export) gets its own, so it never queues the API's reads.
   */
  async fork(lanes: number): Promise<Duck> {
    const connections = await Promise.all(Array.from({ length: lanes }, () => this.instance.connect()));
    const forked = connections.map((c) => new Lane(c));
    for (const lane of forked) this.all.add(lane);
    return new Duck(this.instance, forked, this.all);
  }

  /** Statements queued or running on these lanes. */
  get pending(): number {
    return this.lanes.reduce((n, l) => n + l.pending, 0);
  }

  private lane(): Lane {
    let best = this.lanes[0];
    for (const l of this.lanes) if (l.pending < best.pending) best = l;
    return best;
  }

  async run(sql: string, params?: Params, types?: ParamTypes): Promise<number> {
    return this.lane().run(async (c) => Number((await c.run(sql, params, types)).rowsChanged), this.signal);
  }

  async rows(sql: string, params?: Params, types?: ParamTypes): Promise<JsonRow[]> {
    return this.lane().run(async (c) => {
      const reader = await c.runAndReadAll(sql, params, types);
      return reader.getRowObjectsJson() as JsonRow[];
    }, this.signal);
  }

  /** The result as DataChunks, for callers that read vectors directly instead of row objects. */
  async chunks(sql: string, params?: Params, types?: ParamTypes): Promise<DuckDBDataChunk[]> {
    return this.lane().run(async (c) => (await c.run(sql, params, types)).fetchAllChunks(), this.signal);
  }

  /**
   * The result a chunk at a time, each handed to `each` before the next is read: a whole file's
   * rows never sit in memory at once.
   */
  async stream(sql: string, each: (chunk: DuckDBDataChunk) => Promise<void> | void, params?: Params): Promise<void> {
    return this.lane().run(async (c) => {
      const result = await c.stream(sql, params);
      for (let chunk = await result.fetchChunk(); chunk && chunk.rowCount > 0; chunk = await result.fetchChunk()) await each(chunk);
    }, this.signal);
  }

  /**
   * Closes the instance once every lane's statements have ended (`shutdown`): closing a connection
   * or the instance under a running statement freed what DuckDB's worker thread was using
   * (SIGSEGV in duckdb::ClientContext::LockContext, seen in the test suite when an API stopped with
   * a serving copy's write still running on its own lane).
   */
  close(): Promise<void> {
    return this.shutdown();
  }

  /**
   * Closes the instance once no statement runs on any of its lanes: running ones are interrupted,
   * and each gets up to `waitMs` to end. Closing a connection under a running statement leaves
   * DuckDB's worker waiting on its own lock (seen: \`make api\` never exiting on SIGTERM, its
   * process.exit joining that thread forever).
   */
  async shutdown(waitMs = 10_000): Promise<void> {
    const lanes = [...this.all];
    // A statement queued while the lanes drain (a background task's next step) runs, and is waited for, too.
    const drained = async () => {
      while (lanes.some((l) => l.pending > 0)) {
        for (const lane of lanes) if (lane.pending > 0) lane.connection.interrupt();
        await Promise.all(lanes.map((l) => l.idle()));
      }
      return true;
    };
    let timer: NodeJS.Timeout | undefined;
    const idle = await Promise.race([drained(), new Promise<false>((r) => (timer = setTimeout(() => r(false), waitMs)))]);
    clearTimeout(timer);
    // Still running past the bound: leave the instance open rather than hang in its close; the process is ending.
    if (!idle) return;
    for (const lane of lanes) lane.close();
    this.instance.closeSync();
  }
}

/** Quotes a path the server computed itself for splicing into SQL (never user text). */
