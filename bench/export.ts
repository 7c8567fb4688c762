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
import { syntheticMarket } from '../src/lake/synthetic.js';
import { DAY } from '../src/time.js';

const DAY0 = Date.parse('2026-09-01T00:00:00Z');
const root = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-export-'));
const duck = await Duck.open(2);
const ID = '99000001';

await syntheticMarket(duck, root, ID, DAY0, DAY);

const config = loadConfig({ DATA_DIR: root, LOG_LEVEL: 'silent' });
const api = await startApi(config, duck, createClock(DAY0 + 2 * DAY, 1), pino({ level: 'silent' }), { port: 0 });
const { key } = await api.keys.issue('paid', 'bench');

async function exportOnce(format: 'csv' | 'parquet') {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 5);
  const started = performance.now();
  const res = await fetch(`${api.url}/v3/wallet-prediction/${ID}/snapshots?format=${format}`, {
    headers: { authorization: `Bearer ${key}` },
  });
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
await duck.close();
await fs.rm(root, { recursive: true, force: true });

const report = `## Exports (\`make bench-export\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
One synthetic market spanning a whole day (a real one spans at most 15 minutes): 172,800 book rows, 15 levels a side,
exported through the API (DuckDB COPY into a temporary file on an export connection, streamed while it grows) while RSS is sampled every 5 ms.

| format | status | export size | first byte | time | peak RSS growth |
|---|---|---|---|---|---|
${runs.map((r) => `| ${r.format} | ${r.status} | ${(r.bytes / 2 ** 20).toFixed(1)} MiB | ${r.firstByte.toFixed(0)} ms | ${r.seconds.toFixed(2)} s | ${r.growth.toFixed(1)} MiB |`).join('\n')}

Memory does not grow with the export: DuckDB writes to disk at its own pace and the response streams the file as it grows,
so a slow client holds an export slot and a file, never a thread or a query; an ascending export of every record needs no sort.
`;
await writeSection('## Exports', report);
