// make bench-trades: trades through capture's own path, spooled as streamed capture spools them
// (one market's sorted run per partition, JSON lines, fsynced by flushes) and sealed into zstd
// Parquet: trades ingested per second, spool and Parquet bytes per trade. Figures go into BENCHMARKS.md.
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeSection } from './report.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths, partitionOf } from '../src/lake/layout.js';
import { sealDue } from '../src/lake/seal.js';
import { Spool } from '../src/lake/spool.js';
import type { TradeRow } from '../src/records.js';
import { HOUR } from '../src/time.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

const HOUR0 = Date.parse('2026-07-26T13:00:00Z');
const TRADES = Number(process.env.BENCH_TRADES ?? 1_000_000);
const MARKETS = 100;
const BATCH = 1000;

const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-trades-'));
const paths = lakePaths(dir);
const spool = new Spool(paths.spool);
let seed = 11;
const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;

/** A trade as the venue streams it: prices on the 0.001 tick, sizes to the cent, a 66-character hash. */
function trade(i: number): TradeRow {
  const market = i % MARKETS;
  const outcome = random() < 0.5 ? 0 : 1;
  const ts = HOUR0 + Math.floor((i / TRADES) * HOUR);
  return {
    ts,
    market_id: String(1_000_000 + market),
    token_id: `7108255942817004617739286502000000797${String(market * 2 + outcome).padStart(4, '0')}`,
    outcome_index: outcome,
    outcome: outcome === 0 ? 'Up' : 'Down',
    price: Math.round(random() * 1000) / 1000,
    size: Math.round(random() * 50_000) / 100,
    side: random() < 0.5 ? 'buy' : 'sell',
    fee_rate_bps: 0,
    transaction_hash: `0x${Math.floor(random() * 2 ** 52)
      .toString(16)
      .padStart(64, '0')}`,
    source: 'stream',
    exchange_ts: ts,
    recv_ts: ts + 40 + Math.floor(random() * 60),
  };
}

const started = performance.now();
for (let i = 0; i < TRADES; i += BATCH) {
  // By market, as a stream thread hands rows over: each market's run in order.
  const byMarket = new Map<string, TradeRow[]>();
  for (let j = i; j < Math.min(TRADES, i + BATCH); j++) {
    const row = trade(j);
    byMarket.set(row.market_id, [...(byMarket.get(row.market_id) ?? []), row]);
  }
  for (const rows of byMarket.values()) spool.append(partitionOf('trades', 'polymarket', 'btc', '5m', rows[0].ts), rows);
  if ((i / BATCH) % 100 === 99) await spool.flush();
}
await spool.flush();
const ingestSeconds = (performance.now() - started) / 1000;
const spoolBytes = (
  await Promise.all((await listFiles(paths.spool, '.ndjson')).map((f) => fs.stat(path.join(paths.spool, f)).then((s) => s.size)))
).reduce((a, b) => a + b, 0);
await spool.close();

const duck = await Duck.open(1);
const sealStarted = performance.now();
const report = await sealDue(duck, paths, HOUR0 + 3 * HOUR, () => 0);
const sealSeconds = (performance.now() - sealStarted) / 1000;
const parquet = await listFiles(paths.lake, '.parquet');
const parquetBytes = (await Promise.all(parquet.map((f) => fs.stat(path.join(paths.lake, f)).then((s) => s.size)))).reduce(
  (a, b) => a + b,
  0,
);
const [{ n }] = (await duck.rows(`SELECT count(*)::INTEGER AS n FROM read_parquet('${paths.lake}/trades/**/*.parquet')`)) as {
  n: number;
}[];
await duck.close();
await fs.rm(dir, { recursive: true, force: true });
if (n !== TRADES) throw new Error(`sealed ${n} trades of ${TRADES}`);

await writeSection(
  '## Trades (`make bench-trades`)',
  `## Trades (\`make bench-trades\`)

Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.
${TRADES.toLocaleString('en')} trades of ${MARKETS} markets in one hour, every field filled as Polymarket's \`last_trade_price\` fills it
(a 66-character transaction hash), appended to capture's spool by market as a stream thread hands them over, fsynced every
${(100 * BATCH).toLocaleString('en')} trades, then sealed into zstd Parquet (${report.files} file(s), one DuckDB thread, as capture seals).

| step | time | trades/s | bytes per trade |
|---|---|---|---|
| spool (append, flush, fsync) | ${ingestSeconds.toFixed(2)} s | ${Math.round(TRADES / ingestSeconds).toLocaleString('en')} | ${(spoolBytes / TRADES).toFixed(1)} (JSON lines) |
| seal into Parquet | ${sealSeconds.toFixed(2)} s | ${Math.round(TRADES / sealSeconds).toLocaleString('en')} | ${(parquetBytes / TRADES).toFixed(1)} (zstd Parquet, on disk) |

For scale: the stand-in trades about once every 4 s per token; a busy real 15-minute market a few hundred times an hour.
`,
);
