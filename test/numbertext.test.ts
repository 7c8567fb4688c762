// How a venue wrote its numbers, kept as codes: each form read back exactly, and texts no code says kept whole.
import t from 'tap';
import { bookTextForm, numberText, textForm } from '../src/numbertext.js';

t.test('a shared count of decimals, the shortest form, or neither', async (t) => {
  t.equal(textForm(['0.50', '123.00', '0.01']), 2);
  t.equal(textForm(['30', '7']), 0);
  t.equal(textForm(['0.5', '0.51', '14225.02']), null, 'each its shortest form, counts differ');
  t.equal(textForm([]), null);
  t.equal(textForm(['10.0', '20.55']), undefined, 'neither: kept whole');
  t.equal(textForm(['.48']), undefined, 'a dropped leading zero is not a number written back by either');
  t.equal(textForm(['1e-7']), null, 'what a DOUBLE prints as: the shortest form');
});

t.test('every form gives its texts back from the numbers alone', async (t) => {
  const cases = [['0.50', '123.00', '0.01'], ['0.020', '0.999'], ['0.5', '0.51', '14225.02'], ['219.217767'], ['0', '0.000001']];
  for (const texts of cases) {
    const form = textForm(texts);
    t.not(form, undefined, texts.join(' '));
    t.same(
      texts.map((x) => numberText(Number(x), form ?? null)),
      texts,
      texts.join(' '),
    );
  }
});

t.test('a book: two codes, or its four ladders as written', async (t) => {
  t.same(bookTextForm({ bidPrices: ['0.48'], bidSizes: ['30.00'], askPrices: ['0.52'], askSizes: ['1.50'] }), {
    price_decimals: 2,
    size_decimals: 2,
    level_texts: null,
  });
  const mixed = { bidPrices: ['0.48'], bidSizes: ['30.0'], askPrices: ['0.52'], askSizes: ['1.55'] };
  t.same(bookTextForm(mixed), { price_decimals: null, size_decimals: null, level_texts: '[["0.48"],["30.0"],["0.52"],["1.55"]]' });
});
