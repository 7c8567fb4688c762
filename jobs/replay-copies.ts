// make replay-copies: writes the replay copy of every finished market of the lake (both venues) that
// lacks one, newest first, as far as COPIES_SHARE leaves room (the API writes those of markets ended in
// the last hours by itself, and older ones after their second replay). Idempotent; safe beside capture and the API.
import path from 'node:path';
import { proofOf, readHeartbeat } from '../src/capture/heartbeat.js';
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { LakeReader } from '../src/lake/reader.js';
import { createLogger } from '../src/log.js';
import { ReplayCopies } from '../src/replay/copy.js';
import { lakeCopyBudget } from '../src/replay/copybudget.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'replay-copies', 1, config.logFormat);
const paths = lakePaths(config.dataDir);
const duck = await Duck.open(1);
const lake = new LakeReader(duck, paths);
await lake.open();
// A market capture still holds (its last rows not flushed yet) is not finished: its copy waits.
lake.setProof(proofOf(await readHeartbeat(paths), Date.now(), config.api.captureDownAfterMs));
const began = performance.now();
// Within COPIES_SHARE, newest markets first: a market that does not fit is not written.
const copies = new ReplayCopies(path.join(paths.serving, 'replay'), lake, log, lakeCopyBudget(config, paths, lake));
await copies.settle();
copies.sweep(clockFrom(config.clock).now(), Infinity);
await copies.idle();
log.info({ ...copies.stats, ...copies.budget?.stats, ms: Math.round(performance.now() - began) }, 'replay copies');
await duck.close();
