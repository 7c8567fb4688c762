// `make mirror-bucket`: every sealed file and manifest of DATA_DIR's lake into the bucket (S3_*),
// then one commit object naming them. Idempotent: a file the bucket holds with the manifest's
// sha256 is not sent again, so a re-run after an interruption sends only what is missing.
import { Publisher } from '../src/bucket/publish.js';
import { S3 } from '../src/bucket/s3.js';
import { loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { createLogger } from '../src/log.js';

const config = loadConfig();
const log = createLogger(config.logLevel, 'mirror-bucket', 1, config.logFormat);
if (!config.bucket) {
  log.error('S3_BUCKET is not set: name the bucket, its S3_ENDPOINT and credentials (README, "The lake on object storage")');
  process.exit(2);
}
const s3 = new S3(config.bucket);
const duck = await Duck.open(1);
const began = performance.now();
try {
  await s3.ensureBucket();
  const report = await new Publisher(lakePaths(config.dataDir), s3, log, config.publishSnapshotMs, duck).mirror();
  log.info(
    { bucket: config.bucket.bucket, prefix: config.bucket.prefix, ...report, ms: Math.round(performance.now() - began) },
    'mirrored',
  );
} catch (err) {
  log.error({ error: (err as Error).message }, 'mirror failed; run it again to continue');
  process.exitCode = 1;
} finally {
  s3.close();
  await duck.shutdown();
}
