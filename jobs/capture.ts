// Long-running capture. SIGINT/SIGTERM flush the spool and stop; a restart resumes.
import { Capture } from '../src/capture/capture.js';
import { captureFeedOf } from '../src/capture/feed.js';
import { clockFrom } from '../src/clock.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { sealingDuck } from '../src/lake/seal.js';
import { acquireLock } from '../src/lake/lock.js';
import { createLogger } from '../src/log.js';
import { createAdapters } from '../src/venues/index.js';
import { publisherFor } from '../src/bucket/publish.js';
import { startMerging } from '../src/bucket/merger.js';
import { onBooksFile } from '../src/lake/writer.js';
import { writeServingCopy } from '../src/pages/copywriter.js';

// Sealed books files get their serving copy before their commit (the API's fast page path).
onBooksFile(writeServingCopy);

const config = loadConfig();
const log = createLogger(config.logLevel, 'capture', 1, config.logFormat);
const release = await acquireLock(config.dataDir, 'capture');
const clock = clockFrom(config.clock);
const duck = await Duck.open(1, sealingDuck(config));
const capture = new Capture(config, clock, duck, createAdapters(config, clock), log, publisherFor(config, log, duck));
await capture.start();
// One of several recorders: it also merges what they all published into the record.
const merging = config.recorderId ? startMerging(config, await duck.fork(1), log) : null;
const feed = await captureFeedOf(config, capture, log);
let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await feed?.close();
  await merging?.stop();
  await capture.stop();
  await duck.shutdown();
  await release();
  process.exit(0);
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
// Spawned over IPC by a supervisor (the test suite, a process manager) that is gone: stop as on SIGTERM.
process.once('disconnect', stop);
