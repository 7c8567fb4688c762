// Merges what the recorders published under the bucket's `_recorders/` into the record at its
// prefix, every MERGE_MS until SIGINT/SIGTERM (`--once`: one pass, its report printed). Any number
// may run, anywhere: merges of the same inputs write the same files (bucket/merger.ts).
import path from 'node:path';
import { Merger, startMerging } from '../src/bucket/merger.js';
import { S3 } from '../src/bucket/s3.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { sealingDuck } from '../src/lake/seal.js';
import { createLogger } from '../src/log.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'merge', 1, config.logFormat);
if (!config.bucket) {
  log.error('make merge needs S3_BUCKET (and its endpoint and credentials)');
  process.exit(2);
}
const duck = await Duck.open(1, sealingDuck(config));
if (process.argv.includes('--once')) {
  const merger = new Merger(new S3(config.bucket), path.join(config.dataDir, 'state', 'merge'), duck, log, {
    concurrency: config.mergeConcurrency,
    cacheBytes: config.mergeCacheBytes,
  });
  const report = await merger.pass();
  process.stdout.write(`${JSON.stringify(report)}\n`);
  await duck.shutdown();
  process.exit(0);
}
const merging = startMerging(config, duck, log);
const stop = async () => {
  await merging.stop();
  await duck.shutdown();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
