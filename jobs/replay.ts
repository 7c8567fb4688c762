// `make replay`: a recorded range as newline-delimited venue messages, to a file or stdout.
import fs from 'node:fs';
import { parseArgs } from 'node:util';
import { createClock } from '../src/clock.js';
import { VENUES, type Venue, WINDOWS, type Window, loadConfig } from '../src/config.js';
import { Duck } from '../src/lake/duckdb.js';
import { lakePaths } from '../src/lake/layout.js';
import { LakeReader } from '../src/lake/reader.js';
import { replayToFile } from '../src/replay/file.js';
import { proofOf, readHeartbeat } from '../src/capture/heartbeat.js';
import { parseTime } from '../src/time.js';

const { values } = parseArgs({
  options: {
    venue: { type: 'string', default: 'polymarket' },
    from: { type: 'string' },
    to: { type: 'string' },
    speed: { type: 'string', default: 'max' },
    markets: { type: 'string', default: '' },
    coin: { type: 'string', default: '' },
    window: { type: 'string', default: '' },
    out: { type: 'string', default: '' },
  },
});

function usage(message: string): never {
  console.error(`replay: ${message}
usage: make replay VENUE=polymarket|wallet-prediction FROM=<time> TO=<time> [COIN=btc] [WINDOW=5m|15m] [MARKETS=id,id] [SPEED=max|<multiple>] [OUT=file.ndjson]`);
  process.exit(2);
}

const venue = values.venue as Venue;
if (!VENUES.includes(venue)) usage(`VENUE must be one of ${VENUES.join(', ')}`);
const from = parseTime(values.from ?? '');
const to = parseTime(values.to ?? '');
if (from === null || to === null || to <= from) usage('FROM and TO must be times (ISO 8601 or epoch ms), TO after FROM');
const speed = values.speed === 'max' ? Infinity : Number(values.speed);
if (!(speed > 0)) usage('SPEED must be "max" or a positive multiple of real time');
if (values.window && !WINDOWS.includes(values.window as Window)) usage(`WINDOW must be one of ${WINDOWS.join(', ')}`);

const config = loadConfig();
const duck = await Duck.open(1);
const lake = new LakeReader(duck, lakePaths(config.dataDir));
await lake.open();
// What the API adds to the lake too: the rest of each window a stopped capture held is a gap.
lake.setProof(proofOf(await readHeartbeat(lake.paths), Date.now(), config.api.captureDownAfterMs));
const out = values.out ? fs.createWriteStream(values.out) : process.stdout;
const written = await replayToFile(
  lake,
  createClock(),
  {
    venue,
    from,
    to,
    speed,
    markets: values.markets ? values.markets.split(',') : undefined,
    coin: values.coin || undefined,
    window: (values.window || undefined) as Window | undefined,
  },
  out,
);
if (out !== process.stdout) await new Promise<void>((resolve) => (out as fs.WriteStream).end(resolve));
console.error(`replay: ${written.messages} messages of ${written.markets} markets${values.out ? ` to ${values.out}` : ''}`);
await duck.close();
