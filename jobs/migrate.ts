// make migrate: rewrites sealed files in an older form (naive times before 2026-11-23, books
// without verified_by before 2026-11-26), and gives a lake without gaps an empty gaps file. Idempotent; safe
// while the API reads and capture records (capture writes only UTC-adjusted files).
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { acquireLock } from '../src/lake/lock.js';
import { migrateTimestamps } from '../src/lake/migrate.js';
import { createLogger } from '../src/log.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'migrate', 1, config.logFormat);
// Compaction rewrites the same partitions: one or the other at a time.
const release = await acquireLock(config.dataDir, 'compact');
const duck = await Duck.open(1);
log.info(await migrateTimestamps(duck, lakePaths(config.dataDir)), 'lake migrated');
await duck.close();
await release();
