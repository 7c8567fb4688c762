// A real S3-compatible server for tests: Ceph's RADOS Gateway on a single-node cluster from
// Debian's packages (scripts/rgw.sh), in the test's own directory, stopped when the test ends.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Test } from 'tap';

const run = promisify(execFile);
const SCRIPT = path.resolve('scripts/rgw.sh');

/** A port free now, its monitor's (port + 1000) a port too, neither in Ceph's OSD range (6800-7300). */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = net.createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    if (port < 64_000 && (port < 5_800 || port > 7_300)) return port;
  }
}

export interface Rgw {
  /** S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY. */
  env: Record<string, string>;
  /** Stops the gateway alone (the cluster keeps the objects): a bucket outage. */
  gatewayStop(): Promise<void>;
  gatewayStart(): Promise<void>;
}

export async function startRgw(t: Test): Promise<Rgw> {
  // Outside tap's fixture directory, which is removed when the test ends, possibly before the
  // teardown that stops the daemons: they would be left running on a directory that is gone.
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'pmh-rgw-'));
  // Root installs the packages on a fresh machine (as CI runs); elsewhere the script says what to run.
  await run('bash', [SCRIPT, 'install'], { timeout: 900_000 });
  const port = await freePort();
  // Before the start: a start that times out still has its daemons stopped (stop is idempotent).
  t.teardown(() => run('bash', [SCRIPT, 'stop', dir], { timeout: 120_000 }).then(() => undefined));
  const { stdout } = await run('bash', [SCRIPT, 'start', dir, String(port)], { timeout: 300_000 });
  const env: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const m = /^(S3_[A-Z_]+)=(.*)$/.exec(line.trim());
    if (m) env[m[1]] = m[2].replace(/^['"]|['"]$/g, '');
  }
  return {
    env,
    gatewayStop: () => run('bash', [SCRIPT, 'gateway-stop', dir], { timeout: 120_000 }).then(() => undefined),
    gatewayStart: () => run('bash', [SCRIPT, 'gateway-start', dir], { timeout: 300_000 }).then(() => undefined),
  };
}
