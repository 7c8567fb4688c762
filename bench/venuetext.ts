// make bench-venuetext: what keeping the venue's text and hash costs the lake. The streamed-capture
// benchmark's run (bench/stream.ts, unpaced: the stand-in's books of 100 markets over the market
// channel, every hash checked) keeps its sealed books; then each column's zstd Parquet bytes per row,
// from the files' own metadata, and what the hash would cost kept on every row that had one,
// measured by writing the same books with such a column.
import { fork } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { writeSection } from './report.js';
import { Duck } from '../src/lake/duckdb.js';
import { listFiles } from '../src/lake/fsutil.js';
import { parquetSource } from '../src/lake/sql.js';

const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-venuetext-'));
const started = performance.now();
const run = fork(new URL('./stream.ts', import.meta.url), ['--rate', '0'], {
  execArgv: ['--import', 'tsx'],
  env: { ...process.env, BENCH_STREAM_KEEP: dir },
});
const figures = await new Promise<{ changes: number }>((resolve, reject) =>
  run.once('message', (m) => resolve(m as { changes: number })).once('error', reject),
);
await new Promise((r) => run.once('exit', r));
const runSeconds = (performance.now() - started) / 1000;
const duck = await Duck.open(1);
try {
  const books = (await listFiles(path.join(dir, 'books'), '.parquet')).map((f) => path.join(dir, 'books', f));
  const columns = async (files: string[]) => {
    const rows = Number((await duck.rows(`SELECT count(*)::DOUBLE AS n FROM ${parquetSource(files)}`))[0].n);
    const bytes = await duck.rows(
      `SELECT path_in_schema AS col, sum(total_compressed_size)::DOUBLE AS b FROM parquet_metadata([${files.map((f) => `'${f}'`).join(', ')}]) GROUP BY 1`,
    );
    const total = files.length ? (await Promise.all(files.map((f) => fs.stat(f)))).reduce((n, s) => n + s.size, 0) : 0;
    return { rows, total, by: new Map(bytes.map((r) => [String(r.col).split(',')[0], Number(r.b)])) };
  };
  const b = await columns(books);
  const [counts] = await duck.rows(
    `SELECT count(*) FILTER (WHERE hash_check IS NOT NULL)::DOUBLE AS hashed, count(venue_hash)::DOUBLE AS kept,
            count(level_texts)::DOUBLE AS texts, count(DISTINCT hash_fields)::DOUBLE AS fields,
            count(*) FILTER (WHERE venue_hash IS NULL AND hash_check IS NOT NULL)::DOUBLE AS reproduced
     FROM ${parquetSource(books)}`,
  );
  // The alternative: the venue's 40-hex hash kept on every row that had one (random hex: hashes do not compress).
  const always = path.join(dir, 'always.parquet');
  await duck.run(
    `COPY (SELECT *, CASE WHEN hash_check IS NOT NULL THEN md5(random()::VARCHAR) || left(md5(random()::VARCHAR), 8) END AS every_hash
           FROM ${parquetSource(books)} ORDER BY market_id, ts, outcome_index)
     TO '${always}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)`,
  );
  const [every] = await duck.rows(
    `SELECT sum(total_compressed_size)::DOUBLE AS b FROM parquet_metadata('${always}') WHERE path_in_schema = 'every_hash'`,
  );
  const per = (bytes: number, rows: number) => (rows ? bytes / rows : 0).toFixed(2);
  const added = ['price_decimals', 'size_decimals', 'level_texts', 'hash_fields', 'venue_hash'];
  const addedBytes = added.reduce((n, c) => n + (b.by.get(c) ?? 0), 0);
  const others = [...b.by].filter(([c]) => !added.includes(c)).reduce((n, [, v]) => n + v, 0);
  const lines = [
    `## The venue's text and hash in the lake (\`make bench-venuetext\`)`,
    '',
    `Machine: ${os.cpus().length} x ${os.cpus()[0].model.replace(/\s+/g, ' ').trim()}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}.`,
    `The streamed-capture benchmark's lake (\`bench/stream.ts\` unpaced, ${runSeconds.toFixed(0)} s): the stand-in's books of 100 markets x 2 tokens over the market channel, ${figures.changes.toLocaleString('en-US')} changes, ${b.rows.toLocaleString('en-US')} book rows in ${books.length} files. Bytes are zstd Parquet from the files' metadata (column chunks; the rest of a file is its footer).`,
    '',
    '| books column | bytes per row | per recorded change |',
    '|---|---|---|',
    ...added.map((c) => `| \`${c}\` | ${per(b.by.get(c) ?? 0, b.rows)} | ${per(b.by.get(c) ?? 0, figures.changes)} |`),
    `| the five together | ${per(addedBytes, b.rows)} | ${per(addedBytes, figures.changes)} |`,
    `| every other column | ${per(others, b.rows)} | ${per(others, figures.changes)} |`,
    `| the whole files | ${per(b.total, b.rows)} | ${per(b.total, figures.changes)} |`,
    `| the alternative: the venue's hash kept on every row that had one (\`every_hash\`, not written) | ${per(Number(every.b), b.rows)} | ${per(Number(every.b), figures.changes)} |`,
    '',
    `Of ${Number(counts.hashed).toLocaleString('en-US')} books the venue sent a hash with, ${Number(counts.reproduced).toLocaleString('en-US')} are given back by the venue's formula over the row and ${Number(counts.kept).toLocaleString('en-US')} keep the hash as received (\`venue_hash\`); ${Number(counts.texts).toLocaleString('en-US')} rows keep their texts whole (\`level_texts\`); ${Number(counts.fields).toLocaleString('en-US')} distinct \`hash_fields\` (this feed sends no trades, so the last trade never moves; in capture it takes a new value with each trade, a few a second at most: still a dictionary entry and a run).`,
    "Trades keep two such codes (`price_decimals`, `size_decimals`): runs of one small integer, like the books' decimals.",
  ];
  await writeSection("## The venue's text and hash in the lake", lines.join('\n'));
} finally {
  await duck.close();
  await fs.rm(dir, { recursive: true, force: true });
}
