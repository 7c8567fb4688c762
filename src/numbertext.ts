// How a venue wrote its numbers. The lake keeps prices and sizes as DOUBLE, and "0.50", "0.5" and
// "123.00" are one number each; a replay that sends the venue's text (which the venue's book hash
// covers) needs the form back. One small code per row says it: the decimals every number of a kind
// was written with, or null for the shortest form a DOUBLE prints as; texts that fit neither are
// kept whole beside the row (`levelTexts`).

/**
 * The form of `texts`: the count of decimals each was written with when they share one and the
 * number written with that many gives each back; null when each is its number's shortest form;
 * undefined when neither holds (the texts must then be kept as they are). No texts: null.
 */
export function textForm(texts: readonly string[]): number | null | undefined {
  if (!texts.length) return null;
  const dot = texts[0].indexOf('.');
  const decimals = dot < 0 ? 0 : texts[0].length - dot - 1;
  let fixed = decimals <= 20;
  let shortest = true;
  for (const text of texts) {
    const n = Number(text);
    if (fixed && n.toFixed(decimals) !== text) fixed = false;
    if (shortest && String(n) !== text) shortest = false;
    if (!fixed && !shortest) return undefined;
  }
  // A shared count of decimals describes the venue's habit beyond this row ("30.00" and "30.50"
  // alike); the shortest form is said only where the counts differ.
  return fixed ? decimals : null;
}

/** A number as the venue wrote it, from its form (`textForm`). */
export function numberText(value: number, decimals: number | null): string {
  return decimals === null ? String(value) : value.toFixed(decimals);
}

/** A book's ladders (best first) as the venue wrote them. */
export interface LadderTexts {
  bidPrices: readonly string[];
  bidSizes: readonly string[];
  askPrices: readonly string[];
  askSizes: readonly string[];
}

/** What the lake keeps of a book's text beside its numbers (the books columns of the same names). */
export interface BookTextForm {
  price_decimals: number | null;
  size_decimals: number | null;
  /** The four ladders' texts as JSON (`[bid prices, bid sizes, ask prices, ask sizes]`), only where the decimals cannot say them. */
  level_texts: string | null;
}

/** The form of a book's texts: two codes, or the texts themselves where either kind fits no code. */
export function bookTextForm(l: LadderTexts): BookTextForm {
  const price = textForm([...l.bidPrices, ...l.askPrices]);
  const size = textForm([...l.bidSizes, ...l.askSizes]);
  if (price !== undefined && size !== undefined) return { price_decimals: price, size_decimals: size, level_texts: null };
  return { price_decimals: null, size_decimals: null, level_texts: JSON.stringify([l.bidPrices, l.bidSizes, l.askPrices, l.askSizes]) };
}
