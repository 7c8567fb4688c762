// make serving-copies: writes the serving copies a lake's books files lack (one sealed before
// copies existed, or after SERVING_VERSION changed) and removes those of files no longer in the
// lake. Idempotent; safe beside capture and the API.
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { createLogger } from '../src/log.js';
import { refreshLakeServingCopies } from '../src/pages/copywriter.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'serving-copies', 1, config.logFormat);
const paths = lakePaths(config.dataDir);
const duck = await Duck.open(1);
const began = performance.now();
log.info({ ...(await refreshLakeServingCopies(duck, paths)), ms: Math.round(performance.now() - began) }, 'serving copies');
await duck.close();
