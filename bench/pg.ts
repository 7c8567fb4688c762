// PostgreSQL 15 as the benchmarks' alternative: a private cluster on loopback (Debian's package,
// installed when missing), the same book rows loaded from the lake's Parquet, btree on
// (market_id, ts). Shared by bench-compare and bench-recent.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Duck } from '../src/lake/duckdb.js';
import { aptInstall, commandMissing } from './tools.js';

const PG_BIN = '/usr/lib/postgresql/15/bin';

export function sh(cmd: string, args: string[], asPostgres = false): string {
  return execFileSync(asPostgres ? 'runuser' : cmd, asPostgres ? ['-u', 'postgres', '--', cmd, ...args] : args, {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}

/** Debian's packages when they are missing (as root, as on this machine and CI). */
export async function ensureTools(): Promise<void> {
  const missing = [];
  if (!(await fs.stat(`${PG_BIN}/initdb`).catch(() => null))) missing.push('postgresql-15');
  if (commandMissing('wrk')) missing.push('wrk');
  aptInstall(missing);
}

export interface Postgres {
  port: number;
  psql: (sql: string) => string;
  /** Loads the books of `parquet` into `table` (btree on (market_id, ts)); its rows, bytes and seconds. */
  load: (table: string, parquet: string[]) => Promise<{ rows: number; bytes: number; seconds: number }>;
  version: () => string;
  stop: () => void;
}

/** A cluster under `root` (owned by the postgres user: PostgreSQL will not run as root), stopped on exit. */
export function startPostgres(root: string, duck: Duck, pgDir: string): Postgres {
  const port = 55432 + Math.floor(Math.random() * 1000);
  execFileSync('rm', ['-rf', pgDir]);
  execFileSync('mkdir', ['-p', '-m', '777', pgDir]);
  execFileSync('chmod', ['755', root]);
  sh('chown', ['postgres', pgDir]);
  sh(`${PG_BIN}/initdb`, ['-D', pgDir, '-U', 'postgres', '--auth=trust', '-E', 'UTF8'], true);
  sh(
    `${PG_BIN}/pg_ctl`,
    [
      '-D',
      pgDir,
      '-w',
      '-l',
      path.join(pgDir, 'log'),
      '-o',
      `-p ${port} -k ${pgDir} -c listen_addresses=127.0.0.1 -c shared_buffers=1GB -c fsync=off -c full_page_writes=off -c synchronous_commit=off`,
      'start',
    ],
    true,
  );
  const psql = (sql: string) =>
    sh('psql', ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-v', 'ON_ERROR_STOP=1', '-qAt', '-c', sql]);
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    sh(`${PG_BIN}/pg_ctl`, ['-D', pgDir, '-w', '-m', 'fast', 'stop'], true);
  };
  process.on('exit', stop);
  const load = async (table: string, parquet: string[]) => {
    const began = performance.now();
    const csv = path.join(root, `${table}.csv`);
    const utc = (c: string) => `strftime(make_timestamp(epoch_ms(${c}) * 1000), '%Y-%m-%d %H:%M:%S.%g') || '+00'`;
    const arr = (c: string) => `'{' || array_to_string(${c}, ',') || '}'`;
    await duck.run(`COPY (SELECT ${utc('ts')}, market_id, token_id, outcome_index, outcome, ${utc('exchange_ts')}, ${utc('recv_ts')},
        ${arr('bid_prices')}, ${arr('bid_sizes')}, ${arr('ask_prices')}, ${arr('ask_sizes')}
      FROM read_parquet([${parquet.map((f) => `'${f}'`).join(',')}])) TO '${csv}' (FORMAT csv, HEADER false)`);
    psql(`CREATE TABLE ${table} (ts timestamptz NOT NULL, market_id text NOT NULL, token_id text, outcome_index int, outcome text,
      exchange_ts timestamptz, recv_ts timestamptz, bid_prices float8[], bid_sizes float8[], ask_prices float8[], ask_sizes float8[])`);
    psql(`\\copy ${table} FROM '${csv}' WITH (FORMAT csv)`);
    psql(`CREATE INDEX ${table}_market_ts ON ${table} (market_id, ts)`);
    psql(`VACUUM ANALYZE ${table}`);
    await fs.rm(csv);
    return {
      rows: Number(psql(`SELECT count(*) FROM ${table}`).trim()),
      bytes: Number(psql(`SELECT pg_total_relation_size('${table}')`).trim()),
      seconds: (performance.now() - began) / 1000,
    };
  };
  const version = () =>
    sh(`${PG_BIN}/postgres`, ['--version'])
      .trim()
      .replace(/^postgres \(PostgreSQL\) /, '');
  return { port, psql, load, version, stop };
}
