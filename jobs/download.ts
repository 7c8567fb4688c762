// make download DATASET=books COIN=btc WINDOW=15m FROM=2026-07-26 TO=2026-07-27 DEST=./mirror
// Key from PMH_API_KEY (never a flag: it would land in shell history and process lists).
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { download } from '../src/download.js';
import { parseTime } from '../src/time.js';

const { values } = parseArgs({
  options: {
    ns: { type: 'string', default: 'wallet-prediction' },
    dataset: { type: 'string' },
    coin: { type: 'string' },
    window: { type: 'string' },
    from: { type: 'string' },
    to: { type: 'string' },
    dest: { type: 'string' },
    url: { type: 'string' },
    concurrency: { type: 'string', default: '4' },
  },
});
const fail = (message: string): never => {
  console.error(`download: ${message}`);
  process.exit(2);
};
const { client } = loadConfig();
const key = client.apiKey ?? fail('set PMH_API_KEY to your API key');
const dest = values.dest || fail('DEST is required: the folder to mirror into');
const time = (name: string, raw?: string) =>
  raw ? String(parseTime(raw) ?? fail(`${name}=${JSON.stringify(raw)} is not a date or time`)) : undefined;
const baseUrl = values.url || client.apiUrl;
const started = Date.now();
const tty = process.stderr.isTTY;
const report = await download(
  {
    baseUrl,
    key,
    namespace: values.ns!,
    dest,
    concurrency: Number(values.concurrency),
    query: {
      dataset: values.dataset || undefined,
      coin: values.coin || undefined,
      window: values.window || undefined,
      start_time: time('FROM', values.from),
      end_time: time('TO', values.to),
    },
  },
  tty
    ? {
        update(done, total, bytes) {
          const s = (Date.now() - started) / 1000;
          const share = total ? done / total : 1;
          process.stderr.write(
            `\r[${'#'.repeat(Math.round(share * 30)).padEnd(30, '.')}] ${done}/${total} files, ${(bytes / 2 ** 20).toFixed(1)} MiB, ${(bytes / 2 ** 20 / Math.max(s, 0.001)).toFixed(1)} MiB/s, ETA ${share ? Math.ceil(s / share - s) : '?'}s   `,
          );
        },
        finish: () => process.stderr.write('\n'),
      }
    : undefined,
).catch((err: Error) => fail(err.message));
console.log(
  `download: ${report.listed} listed, ${report.downloaded} downloaded (${report.resumed} resumed, ${report.refetched} replaced a corrupt copy), ${report.skipped} already valid, ${(report.bytes / 2 ** 20).toFixed(1)} MiB in ${((Date.now() - started) / 1000).toFixed(1)} s`,
);
for (const f of report.failed) console.error(`FAILED ${f.file}: ${f.reason}`);
process.exit(report.failed.length ? 1 : 0);
