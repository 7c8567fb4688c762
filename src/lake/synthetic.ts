// A synthetic market far longer than any real one (books every second, both outcomes, 15
// levels a side), written through the lake writer with its market record: for benchmarks and
// tests that need exports large enough to take real time.
import fs from 'node:fs/promises';
import path from 'node:path';
import { bareMarket, marketLakeRow } from '../records.js';
import { HOUR } from '../time.js';
import type { Duck } from './duckdb.js';
import { lakePaths, partitionOf } from './layout.js';
import { commitFiles, writeParquet } from './writer.js';
import { spoolSource } from './sql.js';

export async function syntheticMarket(duck: Duck, root: string, id: string, start: number, span: number): Promise<void> {
  const paths = lakePaths(root);
  const trash = path.join(root, 'trash');
  const table = `synthetic_${id.replace(/\W/g, '')}`;
  await duck.run(
    `CREATE TABLE ${table} AS SELECT epoch_ms(s * 1000)::TIMESTAMPTZ AS ts, $id AS market_id, 'tok-' || o::VARCHAR AS token_id,
      o::INTEGER AS outcome_index, CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome,
      epoch_ms(s * 1000 - 80)::TIMESTAMPTZ AS exchange_ts, epoch_ms(s * 1000 + 40)::TIMESTAMPTZ AS recv_ts,
      list_transform(range(15), i -> round(0.49 - 0.01 * i, 2)) AS bid_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS bid_sizes,
      list_transform(range(15), i -> round(0.51 + 0.01 * i, 2)) AS ask_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS ask_sizes
    FROM range($from::BIGINT, $to::BIGINT) r(s), range(2) x(o)`,
    { id, from: start / 1000, to: (start + span) / 1000 },
  );
  for (let h = start; h < start + span; h += HOUR) {
    const p = partitionOf('books', 'wallet-prediction', 'btc', '15m', h);
    const entry = await writeParquet(
      duck,
      paths.lake,
      p,
      `part-synthetic-${id}.parquet`,
      `(SELECT * FROM ${table} WHERE ts >= epoch_ms(${h}::BIGINT) AND ts < epoch_ms(${h + HOUR}::BIGINT))`,
      ['synthetic'],
    );
    await commitFiles(paths.lake, paths.manifest, trash, p, [entry], []);
  }
  await duck.run(`DROP TABLE ${table}`);
  const staging = path.join(root, `market-${id}.ndjson`);
  await fs.writeFile(
    staging,
    `${JSON.stringify(
      marketLakeRow(
        bareMarket({
          market_id: id,
          venue: 'wallet-prediction',
          slug: `synthetic-${id}`,
          title: 'synthetic',
          coin: 'btc',
          window: '15m',
          start_time: start,
          end_time: start + span,
          status: 'closed',
          outcomes: [
            { index: 0, label: 'Up', token_id: 'tok-0' },
            { index: 1, label: 'Down', token_id: 'tok-1' },
          ],
          chain_id: 56,
          chain_name: 'bnb',
        }),
        start,
      ),
    )}\n`,
  );
  const mp = partitionOf('markets', 'wallet-prediction', 'btc', '15m', start);
  await commitFiles(
    paths.lake,
    paths.manifest,
    trash,
    mp,
    [await writeParquet(duck, paths.lake, mp, `part-synthetic-${id}.parquet`, spoolSource('markets', [staging], false), ['synthetic'])],
    [],
  );
  await fs.rm(staging);
}
