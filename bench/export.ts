// make bench-export: memory while exporting a large range. Real markets last at most 15
// minutes, so one synthetic market spanning a whole day (books every second, both outcomes,
// 15 levels a side) is written through the lake writer; then its snapshots are exported as CSV
// and Parquet over HTTP while the process's RSS is sampled. Figures go into BENCHMARKS.md.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { writeSection } from './report.js';
import { startApi } from '../src/api/server.js';
import { createClock } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths, partitionOf } from '../src/lake/layout.js';
import { commitFiles, spoolSource, writeParquet } from '../src/lake/writer.js';
import { marketLakeRow } from '../src/records.js';
import { DAY, HOUR } from '../src/time.js';

const DAY0 = Date.parse('2026-09-01T00:00:00Z');
const root = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-export-'));
const paths = lakePaths(root);
const duck = await Duck.open(2);
const ID = '99000001';

await duck.run(`CREATE TABLE b AS SELECT epoch_ms(s * 1000)::TIMESTAMP_MS AS ts, '${ID}' AS market_id, 'tok-' || o::VARCHAR AS token_id,
    o::INTEGER AS outcome_index, CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome,
    epoch_ms(s * 1000 - 80)::TIMESTAMP_MS AS exchange_ts, epoch_ms(s * 1000 + 40)::TIMESTAMP_MS AS recv_ts,
    list_transform(range(15), i -> round(0.49 - 0.01 * i, 2)) AS bid_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS bid_sizes,
    list_transform(range(15), i -> round(0.51 + 0.01 * i, 2)) AS ask_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS ask_sizes
  FROM range(${DAY0 / 1000}, ${(DAY0 + DAY) / 1000}) r(s), range(2) x(o)`);
for (let h = DAY0; h < DAY0 + DAY; h += HOUR) {
  const p = partitionOf('books', 'wallet-prediction', 'btc', '15m', h);
  const entry = await writeParquet(duck, paths.lake, p, 'part-bench.parquet', `(SELECT * FROM b WHERE ts >= epoch_ms(${h}::BIGINT) AND ts < epoch_ms(${h + HOUR}::BIGINT))`, ['bench']);
  await commitFiles(paths.lake, paths.manifest, path.join(root, 'trash'), p, [entry], []);
}
const staging = path.join(root, 'market.ndjson');
await fs.writeFile(staging, `${JSON.stringify(marketLakeRow({
  market_id: ID, topic_id: null, venue: 'wallet-prediction', slug: 'synthetic-day-long', title: 'synthetic', coin: 'btc', window: '15m',
  start_time: DAY0, end_time: DAY0 + DAY, created_time: null, resolved_time: null, status: 'closed', resolution: 'pending', winning_outcome_index: null,
  condition_id: null, question_id: null, oracle: null, outcomes: [{ index: 0, label: 'Up', token_id: 'tok-0' }, { index: 1, label: 'Down', token_id: 'tok-1' }],
  volume: null, liquidity: null, participant_count: null, chain_id: 56, chain_name: 'bnb', exchange_address: null, exchange_kind: null, collateral: null,
  fee_rate_bps: null, tick_size: null, reference_price_start: null, reference_price_end: null,
}, DAY0))}\n`);
const mp = partitionOf('markets', 'wallet-prediction', 'btc', '15m', DAY0);
await commitFiles(paths.lake, paths.manifest, path.join(root, 'trash'), mp, [await writeParquet(duck, paths.lake, mp, 'part-bench.parquet', spoolSource('markets', [staging], false), ['bench'])], []);
await duck.run('DROP TABLE b');

const config = loadConfig({ DATA_DIR: root, LOG_LEVEL: 'silent' });
const api = await startApi(config, duck, createClock(DAY0 + 2 * DAY, 1), pino({ level: 'silent' }), { port: 0 });
const { key } = await api.keys.issue('paid', 'bench');

async function exportOnce(format: 'csv' | 'parquet') {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
  const started = performance.now();
  const res = await fetch(`${api.url}/v3/wallet-prediction/${ID}/snapshots?format=${format}`, { headers: { authorization: `Bearer ${key}` } });
  let bytes = 0;
  let firstByte = 0;
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    if (!bytes) firstByte = performance.now() - started;
    bytes += chunk.length;
  }
  const seconds = (performance.now() - started) / 1000;
  clearInterval(sampler);
  return { format, status: res.status, bytes, seconds, firstByte, growth: (peak - baseline) / 2 ** 20 };
}

await exportOnce('parquet'); // warm
const runs = [await exportOnce('csv'), await exportOnce('parquet')];
await api.stop();
duck.close();
await fs.rm(root, { recursive: true, force: true });

const report = `## Exports (\`make bench-export\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
One synthetic market spanning a whole day (a real one spans at most 15 minutes): 172,800 book rows, 15 levels a side,
exported through the API (DuckDB COPY into a named pipe the response reads from) while RSS is sampled every 5 ms.

| format | status | export size | first byte | time | peak RSS growth |
|---|---|---|---|---|---|
${runs.map((r) => `| ${r.format} | ${r.status} | ${(r.bytes / 2 ** 20).toFixed(1)} MiB | ${r.firstByte.toFixed(0)} ms | ${r.seconds.toFixed(2)} s | ${r.growth.toFixed(1)} MiB |`).join('\n')}

Memory does not grow with the export: DuckDB writes as the client reads, and an ascending export of every record needs no sort.
`;
await writeSection('## Exports', report);
