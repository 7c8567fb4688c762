// Spool recovery cuts exactly the half-written tail, even when a line is longer than the
// window it reads from the end.
import fs from 'node:fs/promises';
import path from 'node:path';
import t from 'tap';
import { recoverSpool } from '../src/lake/spool.js';

t.test('a half-written tail longer than the read window is cut at the real line end', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'dead-seg/books/venue=polymarket/coin=btc/window=5m/date=2026-07-26/hour=13/000001.ndjson');
  await fs.mkdir(path.dirname(file), { recursive: true });
  const whole = `{"ts":1785070800000,"market_id":"m1","pad":"${'x'.repeat(600_000)}"}\n`;
  const partial = `{"ts":1785070801000,"market_id":"m1","pad":"${'y'.repeat(700_000)}`;
  await fs.writeFile(file, whole + partial);
  const r = await recoverSpool(dir, 'live-seg');
  t.equal(r.truncatedBytes, Buffer.byteLength(partial));
  t.equal(await fs.readFile(file, 'utf8'), whole);
  const again = await recoverSpool(dir, 'live-seg');
  t.equal(again.truncatedBytes, 0, 'recovery is idempotent');
});

t.test('recovery reports each market’s newest spooled row', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'dead-seg/metrics/venue=wallet-prediction/coin=btc/window=15m/date=2026-07-26/hour=13/000001.ndjson');
  await fs.mkdir(path.dirname(file), { recursive: true });
  await fs.writeFile(
    file,
    ['{"ts":10,"market_id":"a"}', '{"ts":30,"market_id":"b"}', '{"ts":20,"market_id":"a"}', '{"ts":99,"mark'].join('\n'),
  );
  const r = await recoverSpool(dir, 'live-seg');
  t.same(Object.fromEntries(r.lastTs), { 'metrics:a': 20, 'metrics:b': 30 });
});
