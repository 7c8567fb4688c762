// The SQL text every statement shares: quoting of the only spliced values (file paths the
// server computed), the sources (sealed Parquet, spooled NDJSON) and relations over both, and
// the column lists. Values from requests are never spliced; they are bound where used.
import type { Dataset } from '../records.js';
import { type Column, SCHEMAS, isTime } from './layout.js';

/** A string literal: quoted, inner quotes doubled. Used for file paths the server computed. */
export function sqlString(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

export const sqlPath = sqlString;

export function sqlIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** `read_parquet([...])` over sealed files. */
export function parquetSource(files: string[], options = ''): string {
  return `read_parquet([${files.map(sqlPath).join(', ')}]${options ? `, ${options}` : ''})`;
}

/** SELECT list turning spool JSON (epoch ms) into the lake's column types. */
export function spoolSelect(dataset: Dataset, extra: readonly Column[] = []): string {
  return [...SCHEMAS[dataset], ...extra]
    .map((c) => (isTime(c) ? `epoch_ms(${sqlIdent(c.name)})::${c.type} AS ${sqlIdent(c.name)}` : sqlIdent(c.name)))
    .join(', ');
}

/**
 * `read_json` over spool parts with the dataset's column types (and `extra` columns after them: a
 * merged record's `recorders`); `lenient` skips a half-written tail.
 */
export function spoolSource(dataset: Dataset, files: string[], lenient: boolean, extra: readonly Column[] = []): string {
  const columns = [...SCHEMAS[dataset], ...extra].map((c) => `${sqlIdent(c.name)}: '${isTime(c) ? 'BIGINT' : c.type}'`).join(', ');
  // A line read whole has its time; a series' gap has no market_id (its first column), so the time decides.
  const first = sqlIdent(SCHEMAS[dataset].find(isTime)!.name);
  return (
    `(SELECT ${spoolSelect(dataset, extra)} FROM read_json([${files.map(sqlPath).join(', ')}], format='newline_delimited', ` +
    `${lenient ? 'ignore_errors=true, ' : ''}columns={${columns}}) WHERE ${first} IS NOT NULL)`
  );
}

export interface Files {
  sealed: string[];
  /** Parts of open hours, read leniently: the writer may be mid-line. */
  spool: string[];
  /** Of `sealed`, files written before some of their dataset's columns were added: the ones each lacks (manifest.ts `lackedColumns`), read as NULL. */
  lacking?: ReadonlyMap<string, readonly string[]>;
}

/** The columns of `dataset` as a SELECT list (all of them by default). */
export function selectList(dataset: Dataset, columns?: readonly string[]): string {
  return (columns ?? SCHEMAS[dataset].map((c) => c.name)).map(sqlIdent).join(', ');
}

/** One relation over sealed Parquet and spooled rows of one dataset, or null when there are no files. */
export function relation(dataset: Dataset, files: Files, columns?: readonly string[]): string | null {
  const wanted = columns ?? SCHEMAS[dataset].map((c) => c.name);
  const parts: string[] = [];
  // Files grouped by the asked-for columns they lack (none, for files of the current form).
  const groups = new Map<string, { missing: string[]; files: string[] }>();
  for (const f of files.sealed) {
    const missing = wanted.filter((c) => files.lacking?.get(f)?.includes(c));
    const key = missing.join(',');
    const group = groups.get(key) ?? groups.set(key, { missing, files: [] }).get(key)!;
    group.files.push(f);
  }
  const types = new Map(SCHEMAS[dataset].map((c) => [c.name, c.type]));
  for (const { missing, files: group } of [...groups.values()].sort((a, b) => a.missing.length - b.missing.length)) {
    const list = missing.length
      ? wanted.map((c) => (missing.includes(c) ? `NULL::${types.get(c)} AS ${sqlIdent(c)}` : sqlIdent(c))).join(', ')
      : selectList(dataset, wanted);
    parts.push(`SELECT ${list} FROM ${parquetSource(group)}`);
  }
  if (files.spool.length) parts.push(`SELECT ${selectList(dataset, wanted)} FROM ${spoolSource(dataset, files.spool, true)}`);
  return parts.length ? parts.join(' UNION ALL ') : null;
}

/** A relation with the columns and types of `dataset` and no rows: what a range without files reads. */
export function emptyRelation(dataset: Dataset, columns: readonly string[]): string {
  const types = new Map(SCHEMAS[dataset].map((c) => [c.name, c.type]));
  return `SELECT ${columns.map((c) => `NULL::${types.get(c)} AS ${sqlIdent(c)}`).join(', ')} WHERE false`;
}

/** The columns of a book as statements select them for the renderers, which find each by name here. */
export const BOOK_SELECTED = [
  'ts',
  'outcome_index',
  'outcome',
  'token_id',
  'exchange_ts',
  'bid_prices',
  'bid_sizes',
  'ask_prices',
  'ask_sizes',
] as const;

/** What a book read needs of the lake's columns: what the renderers select, and the market. */
export const BOOK_COLUMNS = ['market_id', ...BOOK_SELECTED] as const;

export const EXPORT_BOOK_COLUMNS = [...BOOK_COLUMNS, 'recv_ts'] as const;

/** What choosing the times of a snapshot page needs. */
export const TIME_COLUMNS = ['ts', 'market_id', 'outcome_index'] as const;

export type BookSelected = (typeof BOOK_SELECTED)[number];

/** Where `name` is in a result selected by `bookSelect`. */
export function bookColumn(name: BookSelected): number {
  return BOOK_SELECTED.indexOf(name);
}

/** The SELECT list of `BOOK_SELECTED`: times as epoch ms. `r` qualifies the columns with a table alias. */
export function bookSelect(r = ''): string {
  return BOOK_SELECTED.map((name) => {
    const c = `${r ? `${r}.` : ''}${name}`;
    return name.endsWith('ts') ? `epoch_ms(${c})::DOUBLE AS ${name}` : c;
  }).join(', ');
}
