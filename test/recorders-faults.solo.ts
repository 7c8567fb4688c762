// Two recorders, each killed with kill -9 for a minute in turn, four times, with the stand-in's
// stream faults on (changes dropped per connection, so the recorders' copies differ; the wallet
// venue's pushes also reordered and duplicated): the record merged in the bucket still has every
// change outside the stand-in's own faults, none wrong outside a gap, and no downtime gap.
// In `make test`'s solo slot (*.solo.ts, one file at a time after the rest: in the parallel run,
// beside three other files and stress-ng, the faults-off run took 865 s of the 900 s bound; alone
// beside stress-ng this one took 249 s, 118 s idle). `make audit-recorders-faults` runs it alone.
import t from 'tap';
import { killEachInTurn } from './recordersrun.js';

t.test("kill -9 of each recorder in turn, the stand-in's faults on: every change kept or in a gap, none wrong", (t) =>
  killEachInTurn(t, {
    bucket: 'pmh-faults',
    faults: {
      polymarket: { dropRate: 0.002 },
      wallet: { dropRate: 0.0005, reorderRate: 0.01, duplicateRate: 0.02 },
    },
  }),
);
