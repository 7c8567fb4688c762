// The explorer in a real browser (Debian's chromium through playwright-core) against the real
// server over a lake written by capture, with an upstream outage inside the market shown: a key
// pasted, markets filtered, a market opened; the lines, the depth heatmaps and the gap shading
// drawn from data (pixels sampled); a scrub whose ladder equals the API's book at that time; a
// zoom; an export of the view. Screenshots go to test-artifacts/.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Browser, type Page, chromium } from 'playwright-core';
import t from 'tap';
import { WALLET_PREFIX } from '../src/standin/server.js';
import { lakeServer } from './helpers.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARTIFACTS = path.resolve('test-artifacts');
const START = Date.parse('2026-07-27T23:44:00Z');
const END = Date.parse('2026-07-28T00:01:00Z');
const MARKET_START = Date.parse('2026-07-27T23:45:00Z');
const OUTAGE = { from: Date.parse('2026-07-27T23:50:00Z'), to: Date.parse('2026-07-27T23:53:00Z') };

const { api, key: issue } = await lakeServer(t, {
  start: START,
  end: END,
  env: { RATE_PAID_PER_SECOND: '100000', CAPTURE_REFERENCE: 'on' },
  fill: { speed: 120, pollMs: 1000, faults: { outages: [{ path: `${WALLET_PREFIX}/order-book`, from: OUTAGE.from, to: OUTAGE.to }] } },
});
const key = await issue();
const market = api.lake
  .all(END)
  .find((m) => m.venue === 'wallet-prediction' && m.coin === 'btc' && m.window === '15m' && m.start_time === MARKET_START)!;

async function get(p: string): Promise<any> {
  const res = await fetch(`${api.url}${p}`, { headers: { authorization: `Bearer ${key}` } });
  if (res.status !== 200) throw new Error(`${p}: ${res.status}`);
  return res.json();
}

execFileSync(CHROMIUM, ['--version']); // fails here, clearly, when make test could not install it
await fs.mkdir(ARTIFACTS, { recursive: true });
// A fresh profile each launch (playwright's default), no background traffic, no sandbox (root).
const browser: Browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: ['--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});
t.teardown(() => browser.close());
const page: Page = await browser.newPage({ viewport: { width: 1500, height: 1300 }, acceptDownloads: true });
const errors: string[] = [];
page.on('pageerror', (e) => errors.push(e.message));
page.on('response', (r) => {
  if (r.status() >= 400) errors.push(`${r.status()} ${r.url()}`);
});

/** Pixels of a canvas that are not `background`, and the color at (x, y) in canvas pixels. */
async function pixels(selector: string, background: [number, number, number], at?: [number, number]) {
  return page.$eval(
    selector,
    (el, [bg, xy]) => {
      const canvas = el as HTMLCanvasElement;
      const data = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
      let painted = 0;
      for (let i = 0; i < data.length; i += 4)
        if (Math.abs(data[i] - bg[0]) + Math.abs(data[i + 1] - bg[1]) + Math.abs(data[i + 2] - bg[2]) > 12) painted++;
      const o = xy ? (Math.round(xy[1]) * canvas.width + Math.round(xy[0])) * 4 : 0;
      return {
        painted,
        total: canvas.width * canvas.height,
        width: canvas.width,
        height: canvas.height,
        color: xy ? [data[o], data[o + 1], data[o + 2]] : null,
      };
    },
    [background, at ?? null] as const,
  );
}

t.test('a key, a filtered list, a market opened', async (t) => {
  t.ok(market, 'the fill recorded the market');
  await page.goto(`${api.url}/v3/explorer`);
  t.equal(await page.evaluate(() => sessionStorage.getItem('pmh_key')), null, 'a fresh profile holds no key');
  await page.fill('#key', key);
  await page.click('#key-form button[type=submit]');
  await page.waitForSelector('#markets tbody tr');
  t.equal(await page.evaluate(() => sessionStorage.getItem('pmh_key')), key, 'the key is kept for this tab only');
  await page.selectOption('#coin', 'btc');
  await page.selectOption('#window', '15m');
  await page.click('#filters button[type=submit]');
  // The table empties while the filtered list loads: wait for rows, and only matching ones.
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('#markets tbody tr')];
    return rows.length > 0 && rows.every((tr) => tr.children[2].textContent === 'btc' && tr.children[3].textContent === '15m');
  });
  const listed = await page.$$eval('#markets tbody tr', (trs) => trs.map((tr) => tr.getAttribute('data-market-id')));
  const expected = (await get('/v3/wallet-prediction/markets?coin=btc&window=15m&limit=50')).data.map(
    (m: { market_id: string }) => m.market_id,
  );
  t.same(listed, expected, 'the same markets as the API, newest first');
  // Well-covered windows only: the API's own filter, each row showing its share.
  // 5-minute windows: the 15-minute one of this lake holds the injected outage.
  await page.selectOption('#window', '5m');
  await page.selectOption('#min-coverage', '0.9');
  await page.click('#filters button[type=submit]');
  const complete = (await get('/v3/wallet-prediction/markets?coin=btc&window=5m&limit=50&min_coverage=0.9')).data as {
    market_id: string;
    coverage: { share: number };
  }[];
  t.ok(complete.length > 0, 'the lake has such windows');
  await page.waitForFunction(
    (n) =>
      document.querySelectorAll('#markets tbody tr').length === n && /markets/.test(document.getElementById('status')!.textContent ?? ''),
    complete.length,
  );
  t.same(
    await page.$$eval('#markets tbody tr', (trs) => trs.map((tr) => [tr.getAttribute('data-market-id'), tr.children[7].textContent])),
    complete.map((m) => [m.market_id, `${(100 * m.coverage.share).toFixed(1)}%`]),
    `windows 90% covered or more only (${complete.length}), each with its coverage`,
  );
  await page.selectOption('#window', '15m');
  await page.selectOption('#min-coverage', '');
  await page.click('#filters button[type=submit]');
  await page.waitForSelector(`#markets tbody tr[data-market-id="${market.market_id}"]`);
  await page.click(`#markets tbody tr[data-market-id="${market.market_id}"]`);
  await page.waitForFunction(
    () => /snapshots/.test(document.getElementById('status')!.textContent ?? '') && document.querySelector('#ladders table'),
    null,
    { timeout: 30_000 },
  );
  t.match(await page.textContent('#market-facts'), /BTC 15m, 2026-07-27 23:45:00 to 2026-07-28 00:00:00 UTC/);
  const cert = (await get(`/v3/wallet-prediction/${market.market_id}/certificate`)).data.books;
  await page.waitForSelector('#market-certificate[data-books]');
  t.equal(
    await page.textContent('#market-certificate'),
    `${cert.recorded} books recorded in the window: ${cert.verified_by.snapshot} the venue’s own book`,
    'the certificate says what vouched for the books (polled: every one a REST answer)',
  );
  await page.screenshot({ path: path.join(ARTIFACTS, 'explorer-market.png'), fullPage: true });
});

t.test('lines and heatmaps are drawn from the recorded data, gaps shaded', async (t) => {
  const books = await get(`/v3/wallet-prediction/${market.market_id}/snapshots?limit=1000`);
  const chance = (await get(`/v3/wallet-prediction/${market.market_id}/timeseries?metric=chance&limit=1000`)).data;
  t.ok(books.data.length > 30, `${books.data.length} snapshots recorded`);
  t.equal(
    await page.$eval('#series', (el) => Number((el as HTMLElement).dataset.points)),
    chance.length,
    `the chart holds every chance sample (${chance.length}); view ${JSON.stringify(await page.evaluate(() => [(window as any).explorer.view, (window as any).explorer.interval, (window as any).explorer.snapshots.length]))}`,
  );
  // The wallet venue's trades are the last-trade changes REST showed: each marked on the chart.
  const trades = (await get(`/v3/wallet-prediction/${market.market_id}/trades?outcome=0&limit=1000`)).data;
  t.ok(trades.length > 0, `${trades.length} last-trade changes of the shown outcome`);
  t.equal(await page.$eval('#series', (el) => Number((el as HTMLElement).dataset.trades)), trades.length, 'the chart marks every one');
  const chart = await pixels('#series canvas', [255, 255, 255]);
  t.ok(chart.painted > 2000, `the chart has ${chart.painted} drawn pixels`);
  // The reference price under it: every observation of the view, the window's open and close marked.
  const view = await page.evaluate(() => (window as any).explorer.view as [number, number]);
  const observed = (await get(`/v3/reference/btc?start_time=${view[0]}&end_time=${view[1]}&limit=1000`)).data;
  const record = (await get(`/v3/wallet-prediction/${market.market_id}`)).data.reference;
  t.ok(observed.length > 500 && record.open && record.close, `${observed.length} observations; open and close recorded`);
  t.equal(
    await page.$eval('#reference', (el) => Number((el as HTMLElement).dataset.points)),
    observed.length,
    'the reference chart holds every one',
  );
  t.equal(await page.$eval('#reference', (el) => Number((el as HTMLElement).dataset.marks)), 2, 'and marks the open and the close');
  t.match(await page.textContent('#reference-title'), new RegExp(`BTC/USD, Chainlink .*: ${record.outcome_by_reference} by the reference`));
  const line = await pixels('#reference canvas', [255, 255, 255]);
  t.ok(line.painted > 500, `the reference chart has ${line.painted} drawn pixels`);
  const drawn = await page.$$eval('#heatmaps canvas', (cs) => cs.map((c) => Number((c as HTMLCanvasElement).dataset.snapshots)));
  t.same(drawn, [books.data.length, books.data.length], 'each outcome heatmap drew every snapshot');
  const heat = await pixels('#heatmaps canvas[data-outcome="0"]', [13, 17, 23]);
  t.ok(heat.painted / heat.total > 0.05, `the heatmap is not empty: ${heat.painted} of ${heat.total} pixels`);

  const gaps = books.meta.gaps as { from: string; to: string; reason: string }[];
  t.ok(
    gaps.some((g) => Date.parse(g.from) < OUTAGE.to && Date.parse(g.to) > OUTAGE.from),
    `the outage is a recorded gap: ${JSON.stringify(gaps)}`,
  );
  const g = gaps[0];
  const mid = (Date.parse(g.from) + Date.parse(g.to)) / 2;
  const x = ((mid - MARKET_START) / (16 * 60_000)) * heat.width; // the view runs a minute past the end
  // The whole column inside the gap is shading: no bid or ask is drawn where nothing was recorded.
  for (const outcome of [0, 1]) {
    const column = await page.$eval(
      `#heatmaps canvas[data-outcome="${outcome}"]`,
      (el, cx) => {
        const canvas = el as HTMLCanvasElement;
        const data = canvas.getContext('2d')!.getImageData(Math.round(cx), 0, 1, canvas.height).data;
        const colors = new Set<string>();
        for (let i = 0; i < data.length; i += 4) colors.add(`${data[i]},${data[i + 1]},${data[i + 2]}`);
        return [...colors];
      },
      x,
    );
    t.equal(column.length, 1, `outcome ${outcome}: one color down the gap's column (${column.join(' ')})`);
    const [r, g2, b2] = column[0].split(',').map(Number);
    t.ok(
      Math.abs(r - g2) < 8 && Math.abs(g2 - b2) < 8 && r > 20 && r < 80,
      `outcome ${outcome}: and it is the gray of the shading, over no book`,
    );
  }
  t.same(
    await page.evaluate(() => (window as any).explorer.gaps.map((x: any) => [x.from, x.to]).sort()),
    gaps.map((x) => [Date.parse(x.from), Date.parse(x.to)]).sort(),
    "the gaps shaded are the API's",
  );
});

t.test('scrubbing shows the book the API has at that time', async (t) => {
  for (const position of [150, 420, 777]) {
    await page.$eval(
      '#scrub',
      (el, v) => {
        (el as HTMLInputElement).value = String(v);
        el.dispatchEvent(new Event('input'));
      },
      position,
    );
    const at = Date.parse((await page.textContent('#scrub-time')) ?? '');
    await page.waitForFunction((ms) => (window as any).explorer.ladder?.at === ms, at);
    const shown = await page.$$eval('#ladders table', (tables) =>
      tables.map((tb) => ({
        outcome: Number(tb.getAttribute('data-outcome')),
        rows: [...tb.querySelectorAll('tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)),
      })),
    );
    const truth = (await get(`/v3/wallet-prediction/${market.market_id}/snapshots/at?timestamp=${at}`)).data;
    t.equal(
      await page.$eval('#ladders', (el) => (el as HTMLElement).dataset.timestamp),
      truth.timestamp,
      `at ${new Date(at).toISOString()}: the recorded book of ${truth.timestamp}`,
    );
    const expected = truth.books.map((b: any) => ({
      outcome: b.outcome_index,
      rows: Array.from({ length: Math.max(b.bid_prices.length, b.ask_prices.length) }, (_, k) =>
        [b.bid_sizes[k], b.bid_prices[k], b.ask_prices[k], b.ask_sizes[k]].map((v) => (v === undefined ? '' : String(v))),
      ),
    }));
    t.same(shown, expected, 'every level, both sides, both outcomes');
  }
  await page.screenshot({ path: path.join(ARTIFACTS, 'explorer-scrubbed.png'), fullPage: true });
});

t.test('zooming refetches the range; the view exports as CSV', async (t) => {
  const box = (await page.$('#series .u-over'))!;
  const b = (await box.boundingBox())!;
  await page.mouse.move(b.x + b.width * 0.4, b.y + b.height / 2);
  await page.mouse.down();
  await page.mouse.move(b.x + b.width * 0.5, b.y + b.height / 2, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(
    () =>
      (window as any).explorer.view[1] - (window as any).explorer.view[0] < 200_000 &&
      /snapshots/.test(document.getElementById('status')!.textContent ?? ''),
  );
  const [from, to] = await page.evaluate(() => (window as any).explorer.view as [number, number]);
  t.ok(from > MARKET_START && to < MARKET_START + 15 * 60_000, `zoomed to ${new Date(from).toISOString()} - ${new Date(to).toISOString()}`);
  const inView = (await get(`/v3/wallet-prediction/${market.market_id}/snapshots?limit=1000&start_time=${from}&end_time=${to}`)).data
    .length;
  await page.waitForFunction(
    (n) => Number((document.querySelector('#heatmaps canvas') as HTMLCanvasElement).dataset.snapshots) === n,
    inView,
  );
  t.pass(`the heatmap redrew the ${inView} snapshots of the view`);

  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-csv')]);
  const file = path.join(ARTIFACTS, 'view.csv');
  await download.saveAs(file);
  const lines = (await fs.readFile(file, 'utf8')).trimEnd().split('\n');
  t.match(lines[0], /^timestamp,market_id,/);
  t.equal(lines.length - 1, inView * 2, 'the export holds the view: a row per book');
  t.same(errors, [], 'no page error, no failed request');
});
