// Keys pushing pages and a bystander beside them, for the fairness benchmarks (fairness.ts against
// `make api`, fairness-run.ts through `make run`). The pushers run in a process of their own
// (`node bench/pushers.ts push <job.json>`), so the service's processes keep their cores' share.
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PUSH_EVERY_MS = 40;
export const BYSTANDER_EVERY_MS = 200;

export interface Tally {
  statuses: Record<string, number>;
  ms: number[];
}

function tally(into: Tally, status: number, ms: number): void {
  into.statuses[status] = (into.statuses[status] ?? 0) + 1;
  if (status === 200) into.ms.push(ms);
}

async function page(url: string, key: string): Promise<{ status: number; ms: number }> {
  const began = performance.now();
  try {
    const res = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
    await res.arrayBuffer();
    return { status: res.status, ms: performance.now() - began };
  } catch {
    return { status: 0, ms: performance.now() - began };
  }
}

interface PushJob {
  base: string;
  keys: string[];
  paths: string[];
  seconds: number;
}

/** Every key asks a page each PUSH_EVERY_MS unless 2 of its own are still in flight (its plan's rate, 25 a second). */
async function push({ base, keys, paths, seconds }: PushJob): Promise<Record<string, number>> {
  const all: Tally = { statuses: {}, ms: [] };
  const until = Date.now() + seconds * 1000;
  await Promise.all(
    keys.map(async (key, k) => {
      let inFlight = 0;
      let i = k;
      while (Date.now() < until) {
        if (inFlight < 2) {
          inFlight++;
          const p = paths[(i += 7) % paths.length];
          void page(`${base}${p}`, key).then(({ status, ms }) => {
            inFlight--;
            tally(all, status, ms);
          });
        }
        await new Promise((r) => setTimeout(r, PUSH_EVERY_MS));
      }
      while (inFlight > 0) await new Promise((r) => setTimeout(r, 20));
    }),
  );
  return all.statuses;
}

/** The pushers in their own process: resolves with their answers' statuses when they are done. */
export async function startPushers(job: PushJob, dir: string): Promise<Record<string, number>> {
  const file = path.join(dir, `pushers-${process.pid}-${Date.now()}.json`);
  await fs.writeFile(file, JSON.stringify(job));
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'push', file], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout!.on('data', (d) => (out += d));
  return new Promise((resolve) => child.once('exit', () => resolve(JSON.parse(out || '{}') as Record<string, number>)));
}

/** A key within its plan asking one page every BYSTANDER_EVERY_MS after its previous answer, for `seconds`. */
export async function bystander(base: string, key: string, paths: string[], seconds: number): Promise<Tally> {
  const seen: Tally = { statuses: {}, ms: [] };
  for (let i = 0, until = Date.now() + seconds * 1000; Date.now() < until; i++) {
    const began = Date.now();
    const { status, ms } = await page(`${base}${paths[(i * 13) % paths.length]}`, key);
    tally(seen, status, ms);
    await new Promise((r) => setTimeout(r, Math.max(0, BYSTANDER_EVERY_MS - (Date.now() - began))));
  }
  return seen;
}

export const statusText = (s: Record<string, number>) =>
  Object.entries(s)
    .map(([k, v]) => `${v.toLocaleString('en')} x ${k === '0' ? 'connection error' : k}`)
    .join(', ');

/** The bystander's answers and the latency of its 200s, as a table's two cells. */
export function bystanderCells(seen: Tally): string {
  const sorted = [...seen.ms].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
  const asked = Object.values(seen.statuses).reduce((a, b) => a + b, 0);
  return `${statusText(seen.statuses)} of ${asked} | p50 ${at(0.5).toFixed(1)} ms, p99 ${at(0.99).toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`;
}

if (process.argv[2] === 'push') {
  const job = JSON.parse(await fs.readFile(process.argv[3], 'utf8')) as PushJob;
  process.stdout.write(JSON.stringify(await push(job)));
  process.exit(0);
}
