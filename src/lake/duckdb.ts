// One DuckDB instance per process. Connections run one statement at a time, so each is
// wrapped in a queue; callers never share a connection's state by accident.
import { type DuckDBDataChunk, DuckDBInstance, type DuckDBConnection, type DuckDBType, type DuckDBValue } from '@duckdb/node-api';

export type Params = Record<string, DuckDBValue>;
export type ParamTypes = Record<string, DuckDBType>;
export type JsonRow = Record<string, unknown>;

class Lane {
  private tail: Promise<unknown> = Promise.resolve();
  constructor(readonly connection: DuckDBConnection) {}
  run<T>(task: (c: DuckDBConnection) => Promise<T>): Promise<T> {
    const result = this.tail.then(() => task(this.connection));
    this.tail = result.catch(() => undefined);
    return result;
  }
}

export class Duck {
  private next = 0;
  private constructor(private readonly instance: DuckDBInstance, private readonly lanes: Lane[]) {}

  static async open(lanes = 2, options: Record<string, string> = {}): Promise<Duck> {
    const instance = await DuckDBInstance.create(':memory:', { threads: '2', ...options });
    const connections = await Promise.all(Array.from({ length: lanes }, () => instance.connect()));
    const duck = new Duck(instance, connections.map((c) => new Lane(c)));
    // Footers are read once per file instead of once per query.
    await duck.run("SET GLOBAL parquet_metadata_cache = true");
    return duck;
  }

  private lane(): Lane {
    this.next = (this.next + 1) % this.lanes.length;
    return this.lanes[this.next];
  }

  async run(sql: string, params?: Params, types?: ParamTypes): Promise<void> {
    await this.lane().run((c) => c.run(sql, params, types));
  }

  async rows(sql: string, params?: Params, types?: ParamTypes): Promise<JsonRow[]> {
    return this.lane().run(async (c) => {
      const reader = await c.runAndReadAll(sql, params, types);
      return reader.getRowObjectsJson() as JsonRow[];
    });
  }

  /** The result as DataChunks, for callers that read vectors directly instead of row objects. */
  async chunks(sql: string, params?: Params, types?: ParamTypes): Promise<DuckDBDataChunk[]> {
    return this.lane().run(async (c) => (await c.run(sql, params, types)).fetchAllChunks());
  }

  close(): void {
    for (const lane of this.lanes) lane.connection.closeSync();
    this.instance.closeSync();
  }
}

/** Quotes a path the server computed itself for splicing into SQL (never user text). */
export function sqlPath(p: string): string {
  return `'${p.replaceAll("'", "''")}'`;
}
