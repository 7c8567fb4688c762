// A market whose window the clock has passed is still held while its stream's recorder keeps it: the
// recorder lets a market go at a poll cycle's `track`, by the market's own events, so its last changes
// can arrive after the clock's end (a starved sender, the venue's latency). Every heartbeat written in
// that stretch must name the market, or a kill then loses those changes with no gap: the restart
// takes an unnamed market that ended before the heartbeat for one delivered.
import fs from 'node:fs/promises';
import t from 'tap';
import type { Heartbeat } from '../src/capture/heartbeat.js';
import type { Venue } from '../src/config.js';
import type { Market } from '../src/records.js';
import { OPEN, streamRun } from './streamrun.js';
import { sleep } from './helpers.js';

const POLL_MS = 120_000;
// Cycles (each a `track`) at 150, 270, 390 s past the open: the first 5-minute window ends at 300 s,
// 90 clock seconds before the cycle that lets it go, and a heartbeat is written every flush in between.
const START = OPEN + 150_000;
const UNTIL = OPEN + 400_000;

for (const venue of ['polymarket', 'wallet-prediction'] as Venue[]) {
  t.test(`${venue}: every heartbeat names each ended market its recorder still keeps`, async (t) => {
    let checked = 0;
    const unnamed: string[] = [];
    await streamRun(t, {}, 0, 20, {
      venue,
      start: START,
      env: { POLL_MS: String(POLL_MS) },
      during: async (capture, clock) => {
        const stream = capture.streams.get(venue)!;
        const ends = new Map<string, number>();
        while (clock.now() < UNTIL) {
          await sleep(20);
          const text = await fs.readFile(capture.paths.heartbeat, 'utf8').catch(() => null);
          if (text === null) continue;
          const beat = JSON.parse(text) as Heartbeat;
          for (const o of beat.open) ends.set(o.market_id, o.end_time);
          // Read after the heartbeat: still tracked now, so still kept when it was written (a market
          // only ever leaves the tracked set, at a `track` after its end).
          for (const [id, end] of ends) {
            if (beat.ts < end || !stream.tracks({ venue, market_id: id } as Market)) continue;
            checked++;
            if (!beat.open.some((o) => o.market_id === id)) unnamed.push(`${id} (ended ${end}, heartbeat at ${beat.ts})`);
          }
        }
      },
    });
    t.ok(checked > 0, `heartbeats read past a kept market's end: ${checked}`);
    t.same(unnamed, [], 'no heartbeat past a market’s end leaves it out while its recorder keeps it');
  });
}
