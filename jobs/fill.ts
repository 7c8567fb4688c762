// Fills an empty lake from the stand-in (see src/capture/fill.ts). A lake with data is left alone.
import { fill } from '../src/capture/fill.js';
import { StandInUpstream } from '../src/standin/upstream.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { sealingDuck } from '../src/lake/seal.js';
import { listFiles } from '../src/lake/fsutil.js';
import { lakePaths } from '../src/lake/layout.js';
import { acquireLock } from '../src/lake/lock.js';
import { createLogger } from '../src/log.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'fill', 1, config.logFormat);
const paths = lakePaths(config.dataDir);
if ((await listFiles(paths.lake, '.parquet')).length > 0 && !process.argv.includes('--force')) {
  log.info({ lake: paths.lake }, 'lake already has data; not filling');
  process.exit(0);
}
const release = await acquireLock(config.dataDir, 'capture');
const { hours, speed, pollMs } = config.fill;
log.info({ hours, speed, seconds: Math.round((hours * 3600) / (speed - 1)) }, 'filling the lake from the stand-in');
const duck = await Duck.open(1, sealingDuck(config));
const { capture, sealed } = await fill(config, duck, log, { hours, speed, pollMs }, new StandInUpstream());
log.info({ ...capture.stats, sealed }, 'fill done');
await duck.close();
await release();
