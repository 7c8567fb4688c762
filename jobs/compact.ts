// make compact: merge the small files of sealed partitions (safe while readers read).
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { compact } from '../src/lake/compact.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { acquireLock } from '../src/lake/lock.js';
import { createLogger } from '../src/log.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'compact', 1, config.logFormat);
const release = await acquireLock(config.dataDir, 'compact');
const duck = await Duck.open(1);
log.info(await compact(duck, lakePaths(config.dataDir), clockFrom(config.clock).now()), 'compacted');
await duck.close();
await release();
