// One writer per data directory: two capture processes would each think they own the spool.
import fs from 'node:fs/promises';
import path from 'node:path';

export class LockedError extends Error {
  override name = 'LockedError';
}

/** Whether a process of this pid runs (EPERM: it does, as another user). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export async function acquireLock(dataDir: string, name: string): Promise<() => Promise<void>> {
  const file = path.join(dataDir, 'state', `${name}.lock`);
  await fs.mkdir(path.dirname(file), { recursive: true });
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await fs.writeFile(file, String(process.pid), { flag: 'wx' });
      return () => fs.rm(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number(await fs.readFile(file, 'utf8').catch(() => '0'));
      if (holder && holder !== process.pid && alive(holder)) {
        throw new LockedError(`${name} already runs as pid ${holder} on ${dataDir}`);
      }
      await fs.rm(file, { force: true }); // left by a process that died
    }
  }
  throw new LockedError(`could not take ${file}`);
}
