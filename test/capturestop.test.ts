// A window open when capture stops is never counted as covered past what capture held: a real
// capture process, stopped with SIGINT and killed with kill -9 in the middle of windows, beside the
// real API over the same lake. The certificate counts only up to capture's last heartbeat at once,
// shows the rest of the window as a provisional process_down gap, min_coverage excludes the window
// once sealed, and a restart writes the gap as the downtime exactly.
import fs from 'node:fs/promises';
import t from 'tap';
import { startApi } from '../src/api/server.js';
import { lakePaths } from '../src/lake/layout.js';
import { listSpool } from '../src/lake/spool.js';
import { captureEnv, captureProcesses, exited, lakeTable, processRig, quiet, sealAll, sleep, testConfig } from './helpers.js';

const START = Date.parse('2026-07-26T12:44:00Z');
const SPEED = 15;
const { dir, duck, url, clock, clockEnv } = await processRig(t, START, SPEED);
const startCapture = captureProcesses(t, captureEnv(dir, url, clockEnv, { LOG_LEVEL: 'warn' }));
const config = testConfig(dir, { CAPTURE_DOWN_AFTER_MS: '1500', RATE_PAID_PER_SECOND: '100000' });
const api = await startApi(config, duck, clock, quiet, { port: 0 });
t.teardown(() => api.stop());
const key = (await api.keys.issue('paid', 'capture stop test')).key;

interface Market {
  market_id: string;
  start_time: string;
  end_time: string;
  coverage: { share: number } | null;
  availability: { state: string | null; last_modified: string | null };
}
interface Certificate {
  state: string;
  coverage: { share: number; covered_seconds: number; window_seconds: number };
  books: { recorded: number };
  gaps: { from: string; to: string; reason: string; provisional?: true }[];
}

async function get<T>(route: string): Promise<T> {
  const res = await fetch(`${api.url}${route}`, { headers: { authorization: `Bearer ${key}` } });
  if (res.status !== 200) throw new Error(`${route}: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: T }).data;
}

const certificate = (m: Market) => get<Certificate>(`/v3/wallet-prediction/${m.market_id}/certificate`);

/** Polls `probe` until it returns a value, for at most `limitMs` of real time (a failure names what was awaited). */
async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, limitMs = 60_000): Promise<T> {
  const began = Date.now();
  for (;;) {
    const found = await probe();
    if (found) return found;
    if (Date.now() - began > limitMs) throw new Error(`not within ${limitMs} ms: ${what}`);
    await sleep(100);
  }
}

/**
 * A 15-minute wallet market open now, a minute into its window, part of which capture's record
 * covers (recorded books alone are not enough: on a starved machine they may all lie in a gap
 * while the stream comes up, and a window none of whose time is covered is not a partial one).
 */
function recordingMarket(): Promise<Market> {
  return until('a 15m window with a minute of books', async () => {
    const now = clock.now();
    const markets = await get<Market[]>('/v3/wallet-prediction/markets?coin=btc&window=15m&limit=10');
    for (const m of markets) {
      const [s, e] = [Date.parse(m.start_time), Date.parse(m.end_time)];
      // Room left to stop, restart and kill inside it.
      if (now < s + 60_000 || now > e - 6 * 60_000) continue;
      if ((await certificate(m)).coverage.covered_seconds > 0) return m;
    }
    return null;
  });
}

/**
 * The clock times of the market's books in the spool and sealed: a market capture finished is
 * sealed before its hour is (on a starved machine, before a restart's first book is looked for).
 */
async function spooledBooks(marketId: string): Promise<number[]> {
  const sealed = await duck
    .rows(`SELECT epoch_ms(ts)::DOUBLE AS ts FROM ${lakeTable(dir, 'books')} WHERE market_id = $market`, { market: marketId })
    .catch(() => []);
  const ts: number[] = sealed.map((r) => Number(r.ts));
  for (const part of await listSpool(lakePaths(dir).spool)) {
    if (part.partition.dataset !== 'books') continue;
    const text = await fs.readFile(part.file, 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      try {
        const r = JSON.parse(line) as { market_id: string; ts: number };
        if (r.market_id === marketId) ts.push(r.ts);
      } catch {
        // a half-written last line: never acknowledged
      }
    }
  }
  return [...new Set(ts)].sort((a, b) => a - b);
}

const provisionalDown = (c: Certificate) => c.gaps.find((g) => g.reason === 'process_down' && g.provisional);

t.test('SIGINT mid-window: the rest of the window is a gap at once; a restart writes exactly the downtime', async (t) => {
  const first = startCapture();
  const m = await recordingMarket();
  const [start, end] = [Date.parse(m.start_time), Date.parse(m.end_time)];
  first.kill('SIGINT');
  t.equal(await exited(first), 0, 'a clean stop');
  const stoppedAt = clock.now();
  const newest = (await spooledBooks(m.market_id)).at(-1)!;
  const cert = await until('a provisional process_down gap after the stop', async () => {
    const c = await certificate(m);
    return provisionalDown(c) ? c : null;
  });
  t.ok(
    cert.coverage.covered_seconds * 1000 <= stoppedAt - start,
    `covered ${cert.coverage.covered_seconds} s of the window, at most the ${(stoppedAt - start) / 1000} s before the stop`,
  );
  t.match(provisionalDown(cert), { to: new Date(end).toISOString() }, 'the gap runs to the window’s end');
  t.ok(Date.parse(provisionalDown(cert)!.from) <= stoppedAt, 'from capture’s last proof, before the stop');

  const second = startCapture();
  const recorded = await until('the restart’s process_down gap written', async () =>
    api.lake
      .gaps({ venue: 'wallet-prediction', market_id: m.market_id, dataset: 'books' })
      .find((g) => g.reason === 'process_down' && !g.provisional),
  );
  // A flush writes books last (spool.ts: a book on disk vouches for what came with it), so the gap the
  // restart's first book closed can be read before that book is: a gap ending inside the window waits
  // for the rest of its flush (seen once on an idle fresh clone, 2026-11-29). A book that never comes fails.
  const after = async () => (await spooledBooks(m.market_id)).find((ts) => ts > newest);
  const firstAfter = recorded.to_ts < end ? await until('the book that closed the gap, on disk', after) : await after();
  t.equal(recorded.from_ts, newest, 'the gap starts at the newest book the stopped process recorded');
  t.equal(Date.parse(provisionalDown(cert)!.from), recorded.from_ts, 'where the provisional gap said it would');
  // A restart slower than the rest of the window (a starved machine) records nothing of it: the gap runs to its end.
  t.equal(recorded.to_ts, firstAfter ?? end, 'and ends at the first the restarted one recorded, or at the window’s end');
  t.notOk(
    provisionalDown(
      await until('the restart’s first heartbeat read', async () => {
        const c = await certificate(m);
        return provisionalDown(c) ? null : c;
      }),
    ),
    'the provisional gap is gone once capture runs again',
  );

  t.test(
    'kill -9 mid-window: counted only to the last heartbeat at once, a gap once silent; min_coverage excludes the window',
    async (t) => {
      const k = await recordingMarket();
      const [kStart, kEnd] = [Date.parse(k.start_time), Date.parse(k.end_time)];
      second.kill('SIGKILL');
      await exited(second);
      const killedAt = clock.now();
      const right = await certificate(k);
      t.equal(right.state, 'pending', 'a window still open is pending');
      t.ok(
        right.coverage.covered_seconds * 1000 <= killedAt - kStart,
        `at once: covered ${right.coverage.covered_seconds} s, at most the ${(killedAt - kStart) / 1000} s before the kill`,
      );
      const silent = await until('a provisional process_down gap once the heartbeat is silent', async () => {
        const c = await certificate(k);
        return provisionalDown(c) ? c : null;
      });
      t.ok(silent.coverage.covered_seconds * 1000 <= killedAt - kStart, `then: covered ${silent.coverage.covered_seconds} s`);
      // The window ends with capture still down; an operator seals what the spool holds.
      await until('the window over, with its capture lag', async () => clock.now() > kEnd + 61_000, 15 * 60_000);
      await sealAll(duck, dir);
      await api.lake.update();
      const listed = await get<Market[]>(
        `/v3/wallet-prediction/markets?coin=btc&window=15m&min_coverage=0.99&start_time=${kStart}&end_time=${kEnd}`,
      );
      t.notOk(
        listed.some((x) => x.market_id === k.market_id),
        'min_coverage=0.99 leaves out the window capture stopped holding',
      );
      const record = await get<Market>(`/v3/wallet-prediction/${k.market_id}`);
      t.ok(
        record.coverage && record.coverage.share * (kEnd - kStart) <= killedAt - kStart,
        `its record's share: ${record.coverage?.share}`,
      );
      t.equal(record.availability.state, 'partial', 'a partial window, not a complete one');
      const partial = await get<Market[]>(
        `/v3/wallet-prediction/markets?coin=btc&window=15m&state=partial&start_time=${kStart}&end_time=${kEnd}`,
      );
      t.ok(
        partial.some((x) => x.market_id === k.market_id),
        'state=partial lists it',
      );
    },
  );
});
