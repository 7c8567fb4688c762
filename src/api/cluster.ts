// Several API processes on one port (node:cluster: the primary accepts connections and hands
// them to workers in turn). The primary serves nothing itself: it holds every key's rate bucket
// (RateBank), answers the workers' leases, and replaces a worker that dies. Each worker is a
// whole API (its own DuckDB, lake index and book cache), so reads scale with the cores.
import cluster from 'node:cluster';
import type { Logger } from '../log.js';
import { RateBank } from '../edge/ratelimit.js';

export interface ApiCluster {
  port: number;
  stop(): Promise<void>;
}

/** Forks `workers` (running the entry point again, as workers) and resolves once all listen. */
const STOP_MS = 15_000;

export function startCluster(workers: number, log: Logger, options: { incrementalMarking: boolean }): Promise<ApiCluster> {
  const bank = new RateBank();
  // Set before the first fork: a replaced worker starts with the same flags.
  if (!options.incrementalMarking) cluster.setupPrimary({ execArgv: [...process.execArgv, '--no-incremental-marking'] });
  let stopping = false;
  cluster.on('message', (worker, message) => {
    const answer = bank.handle(message);
    if (answer) worker.send(answer);
  });
  // A worker's leased tokens die with it: at most a twentieth of a key's second, once.
  cluster.on('exit', (worker, code, signal) => {
    if (stopping) return;
    log.error({ pid: worker.process.pid, code, signal }, 'api worker died; starting another');
    cluster.fork();
  });
  // Resolves when every worker has exited, not when they disconnected: a worker still finishing its
  // requests (and its files in DATA_DIR) must not outlive a primary that said it stopped.
  // A worker that has not exited once its own drain (5 s) is long over is killed.
  const stop = async () => {
    stopping = true;
    const running = Object.values(cluster.workers ?? {}).filter((w) => w !== undefined && !w.isDead());
    await Promise.all(
      running.map(
        (worker) =>
          new Promise<void>((resolve) => {
            const killer = setTimeout(() => worker!.process.kill('SIGKILL'), STOP_MS);
            worker!.process.once('exit', () => {
              clearTimeout(killer);
              resolve();
            });
            if (worker!.isDead()) resolve();
            else worker!.kill('SIGTERM');
          }),
      ),
    );
  };
  return new Promise((resolve, reject) => {
    let listening = 0;
    const onExit = (_w: unknown, code: number) => {
      if (listening < workers) reject(new Error(`an api worker exited with ${code} before listening`));
    };
    cluster.once('exit', onExit);
    cluster.on('listening', (_worker, address) => {
      if (++listening !== workers) return;
      cluster.off('exit', onExit);
      resolve({ port: address.port, stop });
    });
    for (let i = 0; i < workers; i++) cluster.fork();
  });
}
