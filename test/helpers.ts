import { loadConfig, type Config } from '../src/config.js';
import { Duck, type JsonRow } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { sealDue } from '../src/lake/seal.js';
import pino from 'pino';

export const quiet = pino({ level: process.env.TEST_LOG ?? 'silent' });

export function testConfig(dataDir: string, env: Record<string, string> = {}): Config {
  return loadConfig({ DATA_DIR: dataDir, SPOOL_FLUSH_MS: '100', WALLET_TIMEOUT_MS: '1000', POLYMARKET_TIMEOUT_MS: '1000', ...env });
}

/** Seals everything in the spool, the open hour included. */
export async function sealAll(duck: Duck, dataDir: string) {
  return sealDue(duck, lakePaths(dataDir), Number.MAX_SAFE_INTEGER / 2, () => 0);
}

export function lakeTable(dataDir: string, dataset: string): string {
  return `read_parquet('${dataDir}/lake/${dataset}/**/*.parquet', hive_partitioning = true, hive_types = {'hour': INTEGER})`;
}

export async function one(duck: Duck, sql: string): Promise<JsonRow> {
  return (await duck.rows(sql))[0];
}
