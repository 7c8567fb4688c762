// `make api` as deployed: API_WORKERS processes sharing one port, a key's rate limit held by the
// primary across them, and a worker that dies replaced. Real processes, real HTTP.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import t from 'tap';
import { KeyStore } from '../src/edge/keys.js';
import { startApiProcess, testdir } from './helpers.js';

/** The API workers among the children of `pid` (tsx may run an esbuild service beside them), waiting up to 10 s for `expected`. */
async function children(pid: number, expected: number): Promise<number[]> {
  let pids: number[] = [];
  for (let i = 0; i < 100; i++) {
    try {
      pids = execFileSync('pgrep', ['-P', String(pid), '-f', 'jobs/api.ts'], { encoding: 'utf8' })
        .trim()
        .split('\n')
        .map(Number);
    } catch {
      pids = []; // pgrep exits 1 when there are none
    }
    if (pids.length === expected) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return pids;
}

t.test('two workers share the port and every key’s limit; a dead worker is replaced', async (t) => {
  const dir = testdir(t);
  const { key } = await KeyStore.at(dir).issue('paid', 'cluster');
  const api = await startApiProcess(t, dir, { API_WORKERS: '2', RATE_PAID_PER_SECOND: '20' });
  t.match(
    api.lines.find((l) => l.msg === 'api listening'),
    { workers: 2 },
  );

  const get = () =>
    fetch(`${api.url}/v3/wallet-prediction/markets?limit=1`, { headers: { authorization: `Bearer ${key}`, connection: 'close' } }).then(
      async (res) => ({ status: res.status, id: res.headers.get('x-request-id')!, body: await res.text() }),
    );
  const began = Date.now();
  const replies = await Promise.all(Array.from({ length: 60 }, get));
  const elapsed = Date.now() - began;
  const served = replies.filter((r) => r.status === 200).length;
  t.same(new Set(replies.map((r) => r.status)), new Set([200, 429]), 'answers are served or over the rate');
  t.ok(served >= 20, `the second's worth of the paid rate is served (${served} of 60)`);
  t.ok(served <= 20 + Math.ceil((elapsed / 1000) * 20) + 1, `and no more, across both workers, in ${elapsed} ms`);
  // A request id starts with its process's prefix (then a 6-character counter).
  const processes = new Set(replies.map((r) => r.id.slice(0, -6)));
  t.equal(processes.size, 2, 'connections went to both workers');

  const workers = await children(api.child.pid!, 2);
  const problems = () => JSON.stringify([...api.lines.filter((l) => Number(l.level) >= 40), ...api.stderr]);
  t.equal(workers.length, 2, `the primary has two worker processes (${workers.join(', ')}) ${problems()}`);
  const flags = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
  t.ok(
    workers.every((pid) => flags(pid).includes('--no-incremental-marking')),
    'each worker runs without incremental marking (API_INCREMENTAL_MARKING off by default)',
  );
  process.kill(workers[0], 'SIGKILL');
  for (let i = 0; i < 100 && !api.lines.some((l) => l.msg === 'api worker died; starting another'); i++)
    await new Promise((r) => setTimeout(r, 100));
  t.ok(
    api.lines.some((l) => l.msg === 'api worker died; starting another'),
    'the primary says a worker died',
  );
  await children(api.child.pid!, 2);
  await new Promise((r) => setTimeout(r, 1000));
  const after = await Promise.all(Array.from({ length: 10 }, get));
  t.ok(
    after.every((r) => r.status === 200),
    'and the port is still served',
  );
  const again = await children(api.child.pid!, 2);
  t.equal(again.length, 2, 'by two workers again');
  t.notOk(again.includes(workers[0]), 'one of them new');
  t.ok(
    again.every((pid) => flags(pid).includes('--no-incremental-marking')),
    'the new one with the same flags',
  );
});
