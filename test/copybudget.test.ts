// The replay copies' budget, its pure choices: which copies go (the lowest ranked, until the rest
// fit) and whether a copy is worth writing (room for one of the usual size, or it outranks a kept one).
import t from 'tap';
import { admits, evictions, type KeptCopy } from '../src/replay/copybudget.js';

const copy = (file: string, bytes: number, rank: number): KeptCopy => ({ file, bytes, rank });
const kept = [copy('a', 100, 30), copy('b', 50, 10), copy('c', 200, 20), copy('d', 10, 40)];

t.test('evictions: the lowest ranked first, until what is left fits', async (t) => {
  t.same(evictions(kept, 360), [], 'all fit');
  t.same(
    evictions(kept, 359).map((c) => c.file),
    ['b'],
    'one byte over: the lowest ranked goes',
  );
  t.same(
    evictions(kept, 300).map((c) => c.file),
    ['b', 'c'],
    'the next lowest, though removing a higher one alone would do',
  );
  t.same(
    evictions(kept, 0).map((c) => c.file),
    ['b', 'c', 'a', 'd'],
    'no room: every copy',
  );
  t.same(evictions([], 0), [], 'none kept: none to remove');
  t.same(
    evictions([copy('y', 5, 1), copy('x', 5, 1)], 5).map((c) => c.file),
    ['x'],
    'ties by file name: every process picks the same',
  );
});

t.test('admits: room for a copy of the usual size, or a rank above one kept', async (t) => {
  // 360 kept, 90 the mean.
  t.ok(admits(kept, 450, 0), 'room for another of the mean size');
  t.notOk(admits(kept, 449, 0), 'not quite room, and ranked below all');
  t.notOk(admits(kept, 449, 10), 'ranked as the lowest: not above it');
  t.ok(admits(kept, 449, 11), 'ranked above the lowest');
  t.ok(admits([], 1, 0), 'none kept and some room: tried');
  t.notOk(admits([], 0, Infinity), 'no room at all: never');
});
