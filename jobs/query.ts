// Ad-hoc SQL over the lake: `books`, `metrics`, `markets`, `gaps` and `trades` are views over the sealed
// hive-partitioned Parquet files (what an analyst gets by opening data/lake with DuckDB).
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths } from '../src/lake/layout.js';
import { sqlPath } from '../src/lake/sql.js';
import { DATASETS } from '../src/records.js';

const config = loadConfig();
const { lake } = lakePaths(config.dataDir);
const duck = await Duck.open(1);
const views: string[] = [];
for (const dataset of DATASETS) {
  if ((await listFiles(`${lake}/${dataset}`, '.parquet')).length === 0) continue;
  await duck.run(
    `CREATE VIEW ${dataset} AS SELECT * FROM read_parquet(${sqlPath(`${lake}/${dataset}/**/*.parquet`)}, hive_partitioning = true, hive_types = {'hour': INTEGER})`,
  );
  views.push(dataset);
}
// From the environment, so `make query SQL='..."window"...'` keeps its quotes.
const sql = process.argv[2] ?? process.env.SQL ?? 'SELECT 1';
try {
  if (!views.length)
    throw new Error(`no sealed files under ${lake}: start \`make run\` (or \`make fill\`) first, or point DATA_DIR at a lake`);
  console.table(await duck.rows(sql));
} catch (err) {
  // A person typed this: the message, not a stack trace.
  console.error(`query failed: ${(err as Error).message}${views.length ? `\n(views: ${views.join(', ')} over ${lake})` : ''}`);
  process.exitCode = 1;
} finally {
  await duck.close();
}
