// The benchmark lakes: 3 coins x 2 windows, books and metrics every second for the open market
// of each series (synthetic ladders, 15 levels a side), written by the lake's own writer (one
// sorted COPY per hour file, sha256, manifest). Shared by bench-api and bench-compare.
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Window } from '../src/config.js';
import type { Duck } from '../src/lake/duckdb.js';
import { type LakePaths, lakePaths, partitionOf } from '../src/lake/layout.js';
import { commitFiles, onBooksFile, writeParquet } from '../src/lake/writer.js';
import { marketLakeRow } from '../src/records.js';
import { GENESIS, Sim } from '../src/standin/sim.js';
import { DAY, HOUR, WINDOW_MS } from '../src/time.js';
import { spoolSource } from '../src/lake/sql.js';
import { refreshLakeServingCopies, writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy, as the jobs that seal give them.
onBooksFile(writeServingCopy);

export const END = Date.parse('2026-10-01T00:00:00Z');
const SERIES = ['btc', 'eth', 'bnb'].flatMap((coin) => (['5m', '15m'] as Window[]).map((window) => ({ coin, window })));
const sim = new Sim(1, { 'wallet-prediction': ['btc', 'eth', 'bnb'], polymarket: ['btc'] });

async function buildDay(duck: Duck, paths: LakePaths, day: number, coin: string, window: Window, lane: number): Promise<number> {
  const w = WINDOW_MS[window] / 1000;
  const t = `bench_${lane}`;
  const markets: ReturnType<Sim['market']>[] = [];
  for (let s = day; s < day + DAY; s += WINDOW_MS[window]) markets.push(sim.market('wallet-prediction', coin, window, s));
  const id = (m: ReturnType<Sim['market']>) => String(sim.walletMarketId(m));
  // Synthetic ladders (15 levels a side) keyed exactly like captured rows.
  await duck.run(`CREATE OR REPLACE TABLE ${t} AS SELECT epoch_ms(s * 1000)::TIMESTAMPTZ AS ts,
      (50000000 + (((s // ${w}) * ${w} * 1000 - ${GENESIS}) // 300000 * 8 + ${['btc', 'eth', 'bnb'].indexOf(coin)}) * 2 + ${window === '15m' ? 1 : 0})::VARCHAR AS market_id,
      'tok-' || (s // ${w})::VARCHAR || '-' || o::VARCHAR AS token_id, o::INTEGER AS outcome_index, CASE o WHEN 0 THEN 'Up' ELSE 'Down' END AS outcome,
      epoch_ms(s * 1000 - 80)::TIMESTAMPTZ AS exchange_ts, epoch_ms(s * 1000 + 40)::TIMESTAMPTZ AS recv_ts,
      list_transform(range(15), i -> round(0.49 - 0.01 * i, 2)) AS bid_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS bid_sizes,
      list_transform(range(15), i -> round(0.51 + 0.01 * i, 2)) AS ask_prices, list_transform(range(15), i -> round(random() * 5000, 2)) AS ask_sizes,
      round(0.5 + 0.4 * sin(s / 97.0), 3) AS chance, round(0.5 + 0.4 * sin(s / 101.0), 2) AS price, round(0.5 + 0.4 * sin(s / 89.0), 2) AS last_trade
    FROM range(${day / 1000}, ${(day + DAY) / 1000}) r(s), range(2) x(o)`);
  const staging = path.join(paths.root, `staging-${lane}.ndjson`);
  let files = 0;
  for (let h = day; h < day + DAY; h += HOUR) {
    const hourRows = `(SELECT * FROM ${t} WHERE ts >= epoch_ms(${h}::BIGINT) AND ts < epoch_ms(${h + HOUR}::BIGINT))`;
    const write = async (dataset: 'books' | 'metrics' | 'markets', source: string) => {
      const p = partitionOf(dataset, 'wallet-prediction', coin, window, h);
      const entry = await writeParquet(duck, paths.lake, p, 'part-bench.parquet', source, ['bench']);
      await commitFiles(paths.lake, paths.manifest, path.join(paths.root, 'trash'), p, [entry], []);
      files++;
    };
    await write(
      'books',
      `(SELECT ts, market_id, token_id, outcome_index, outcome, exchange_ts, recv_ts, bid_prices, bid_sizes, ask_prices, ask_sizes FROM ${hourRows})`,
    );
    await write('metrics', `(SELECT ts, market_id, token_id, outcome_index, outcome, chance, price, last_trade, recv_ts FROM ${hourRows})`);
    const inHour = markets.filter((m) => m.start >= h && m.start < h + HOUR);
    await fs.writeFile(
      staging,
      inHour
        .map((m) =>
          JSON.stringify(
            marketLakeRow(
              {
                market_id: id(m),
                topic_id: String(sim.walletTopicId(m)),
                venue: 'wallet-prediction',
                slug: sim.slug(m),
                title: `${coin} ${window}`,
                coin,
                window,
                start_time: m.start,
                end_time: m.end,
                created_time: m.start - HOUR,
                resolved_time: null,
                status: 'resolved',
                resolution: 'resolved',
                winning_outcome_index: 0,
                condition_id: null,
                question_id: null,
                oracle: null,
                outcomes: [
                  { index: 0, label: 'Up', token_id: `tok-${m.start / 1000 / w}-0` },
                  { index: 1, label: 'Down', token_id: `tok-${m.start / 1000 / w}-1` },
                ],
                volume: 1000,
                liquidity: 500,
                participant_count: 10,
                chain_id: 56,
                chain_name: 'bnb',
                exchange_address: null,
                exchange_kind: null,
                collateral: 'USDT',
                fee_rate_bps: 200,
                tick_size: 0.01,
                reference_price_start: null,
                reference_price_end: null,
              },
              m.end,
            ),
          ),
        )
        .join('\n') + '\n',
    );
    await write('markets', spoolSource('markets', [staging], false));
  }
  return files;
}

/** The lake of the `days` before END under `root`, built once (a `built.json` marks it complete). */
export async function buildLake(
  duck: Duck,
  root: string,
  days: number,
): Promise<{ dir: string; seconds: number; files: number; bytes: number }> {
  const dir = path.join(root, `lake-${days}d`);
  const paths = lakePaths(dir);
  const done = path.join(dir, 'built.json');
  const built = await fs.readFile(done, 'utf8').catch(() => null);
  if (built) {
    // A lake kept (BENCH_ROOT) from before SERVING_VERSION changed would serve its pages by SQL.
    await refreshLakeServingCopies(duck, paths);
    // Where it is now: a root moved (or copied) keeps the path it was built at in built.json.
    return { ...JSON.parse(built), dir };
  }
  await fs.rm(dir, { recursive: true, force: true });
  const started = performance.now();
  const jobs: { day: number; coin: string; window: Window }[] = [];
  for (let d = END - days * DAY; d < END; d += DAY) for (const s of SERIES) jobs.push({ day: d, ...s });
  let next = 0;
  let files = 0;
  await Promise.all(
    [0, 1].map(async (lane) => {
      while (next < jobs.length) {
        const j = jobs[next++];
        const written = await buildDay(duck, paths, j.day, j.coin, j.window, lane);
        files += written;
        if (next % 60 === 0) process.stderr.write(`\r${days}-day lake: ${next}/${jobs.length} series-days`);
      }
    }),
  );
  process.stderr.write('\n');
  const du = await fs.readdir(paths.lake, { recursive: true, withFileTypes: true });
  let bytes = 0;
  for (const e of du) if (e.isFile()) bytes += (await fs.stat(path.join(e.parentPath, e.name))).size;
  const result = { dir, seconds: (performance.now() - started) / 1000, files, bytes };
  await fs.writeFile(done, JSON.stringify(result));
  return result;
}
