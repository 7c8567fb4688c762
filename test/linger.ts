// A test process whose tests are all over but which stays alive holds something a stop missed (a
// socket, a timer, a thread): tap would kill it only at its per-file bound (.taprc), naming nothing.
// So such a process says, a minute after its last test, what it still holds, and ends with a failure.
import t from 'tap';

/** Long past any teardown's own bound (a server's drain is 5 s, a child's stop 30 s). */
const LINGER_MS = 60_000;

t.on('complete', () => {
  const wall = Date.now();
  const mono = performance.now();
  setTimeout(() => {
    const lines = [
      `lingering: ${process.argv[1]} alive ${((performance.now() - mono) / 1000).toFixed(1)} s (wall clock ${((Date.now() - wall) / 1000).toFixed(1)} s) after its last test`,
      // A worker thread keeps the process alive but is listed nowhere: resources that are only stdio and this timer mean one.
      `lingering: active resources ${JSON.stringify(process.getActiveResourcesInfo())}`,
      ...handles().map((h) => `lingering: ${h}`),
    ];
    // As TAP comments, so the results file that scripts/failures.sh reads has them too.
    process.stdout.write(lines.map((l) => `# ${l}\n`).join(''));
    process.stderr.write(`${lines.join('\n')}\n`);
    process.exit(1);
  }, LINGER_MS).unref();
});

function handles(): string[] {
  const list = (process as unknown as { _getActiveHandles(): object[] })._getActiveHandles();
  return list.map((h) => {
    const name = h.constructor?.name ?? typeof h;
    const s = h as {
      localPort?: number;
      remoteAddress?: string;
      remotePort?: number;
      address?: () => unknown;
      pid?: number;
      spawnfile?: string;
    };
    if (s.localPort !== undefined) return `${name} :${s.localPort} -> ${s.remoteAddress ?? '?'}:${s.remotePort ?? '?'}`;
    // The process's own stdio, or a pipe to a child.
    if (name === 'Socket') return `${name} (a pipe)`;
    if (typeof s.address === 'function') return `${name} listening ${JSON.stringify(s.address())}`;
    if (s.pid !== undefined) return `${name} pid ${s.pid} ${s.spawnfile ?? ''}`;
    return name;
  });
}
