// Seals finished hours left in the spool (capture does this itself while it runs).
// `--all` also seals the open hour, for example before copying a lake elsewhere.
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { acquireLock } from '../src/lake/lock.js';
import { recoverSpool } from '../src/lake/spool.js';
import { sealDue, sealingDuck } from '../src/lake/seal.js';
import { createLogger } from '../src/log.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'seal', 1, config.logFormat);
const release = await acquireLock(config.dataDir, 'capture');
const paths = lakePaths(config.dataDir);
await recoverSpool(paths.spool, 'none');
const duck = await Duck.open(1, sealingDuck(config));
const all = process.argv.includes('--all');
const now = all ? Number.MAX_SAFE_INTEGER / 2 : clockFrom(config.clock).now();
const grace = (d: string) => (all ? 0 : d === 'markets' ? config.capture.marketsSealGraceMs : config.capture.sealGraceMs);
log.info(await sealDue(duck, paths, now, grace), 'sealed');
await duck.close();
await release();
