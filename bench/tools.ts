// What the benchmarks share: a free port, Debian's packages when missing, and wrk's script and figures.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export async function freePort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

/** Whether a command is missing (`wrk --version` exits 1 when present: only ENOENT says missing). */
export function commandMissing(cmd: string, args: string[] = ['--version']): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** Debian's packages (as root, as on this machine and CI). */
export function aptInstall(packages: string[]): void {
  if (!packages.length) return;
  console.log(`installing ${packages.join(', ')} from Debian's packages`);
  execFileSync('apt-get', ['update'], { stdio: 'inherit' });
  execFileSync('apt-get', ['install', '-y', ...packages], { stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
}

/** A wrk script cycling over `paths` with `headers` on every request. */
export async function writeWrkScript(file: string, paths: string[], headers: Record<string, string>): Promise<void> {
  const header = Object.entries(headers)
    .map(([k, v]) => `["${k}"] = "${v}"`)
    .join(', ');
  await fs.writeFile(
    file,
    `local paths = { ${paths.map((p) => JSON.stringify(p)).join(', ')} }
local i = 0
local headers = { ${header} }
request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i], headers)
end
`,
  );
}

export interface WrkFigure {
  p50: number;
  p99: number;
  rps: number;
  /** Bytes per response. */
  bytes: number;
}

/** wrk's `--latency` output as figures (latencies in ms); a non-2xx answer or socket error is an error. */
export function wrkFigure(out: string): WrkFigure {
  if (/Non-2xx/.test(out) || /Socket errors/.test(out)) throw new Error(`wrk saw errors:\n${out}`);
  const ms = (v: string, unit: string) => Number(v) * ({ us: 0.001, ms: 1, s: 1000 } as Record<string, number>)[unit];
  const pct = (p: string) => {
    const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s)`, 'm').exec(out)!;
    return ms(m[1], m[2]);
  };
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)![1]);
  const transfer = /Transfer\/sec:\s+([\d.]+)([KMG]?B)/.exec(out)!;
  const bytes = (Number(transfer[1]) * ({ B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3 } as Record<string, number>)[transfer[2]]) / rps;
  return { p50: pct('50'), p99: pct('99'), rps, bytes };
}

/** wrk with one thread for `seconds`, cycling over `paths` (its script written to `script`); latencies in ms. */
export async function wrkRun(
  script: string,
  base: string,
  paths: string[],
  connections: number,
  headers: Record<string, string>,
  seconds: number,
): Promise<WrkFigure> {
  await writeWrkScript(script, paths, headers);
  return wrkFigure(
    execFileSync('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, base], { encoding: 'utf8' }),
  );
}

/** The run with the most requests a second. */
export const bestFigure = (xs: WrkFigure[]) => xs.reduce((x, y) => (y.rps > x.rps ? y : x));

export const figureText = (x: WrkFigure) => `${x.p50.toFixed(2)} / ${x.p99.toFixed(2)} ms, ${Math.round(x.rps).toLocaleString('en')}/s`;

/** Each side twice, in turns; the better run of each. */
export async function inTurns(a: () => Promise<WrkFigure>, b: () => Promise<WrkFigure>): Promise<[WrkFigure, WrkFigure]> {
  const xs: WrkFigure[] = [];
  const ys: WrkFigure[] = [];
  for (let round = 0; round < 2; round++) {
    xs.push(await a());
    ys.push(await b());
  }
  return [bestFigure(xs), bestFigure(ys)];
}

/**
 * Ceph's RADOS Gateway on this machine (scripts/rgw.sh, its packages installed when missing), on a
 * port outside Ceph's OSD range: its S3_* settings, and how to stop it (the cluster's data goes with it).
 */
export async function startRgw(): Promise<{ env: Record<string, string>; stop: () => void }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-rgw-'));
  const script = path.resolve('scripts/rgw.sh');
  execFileSync('bash', [script, 'install'], { stdio: 'inherit' });
  let port = await freePort();
  while (port > 64_000 || (port >= 5_800 && port <= 7_300)) port = await freePort();
  const text = execFileSync('bash', [script, 'start', dir, String(port)], { encoding: 'utf8' });
  const env = Object.fromEntries(
    text
      .trim()
      .split('\n')
      .map((l) => l.split('=') as [string, string]),
  );
  return { env, stop: () => execFileSync('bash', [script, 'stop', dir], { stdio: 'inherit' }) };
}

/**
 * A lake built once per BENCH_ROOT: `build` runs into an emptied `dir` only when no `built.json`
 * there says an earlier run finished; its time in seconds is kept in that file.
 */
export async function builtOnce(dir: string, build: () => Promise<void>): Promise<{ seconds: number }> {
  const done = path.join(dir, 'built.json');
  const built = await fs.readFile(done, 'utf8').catch(() => null);
  if (built) return JSON.parse(built);
  await fs.rm(dir, { recursive: true, force: true });
  const began = performance.now();
  await build();
  const result = { seconds: (performance.now() - began) / 1000 };
  await fs.writeFile(done, JSON.stringify(result));
  return result;
}
