// A typed client: openapi-fetch over types generated from the service's OpenAPI document
// (`make client-ts`), plus `walk`, which follows cursors so a caller sees items, not pages.
import createClient, { type Client } from 'openapi-fetch';
import type { paths } from './api.js';

export type { components, operations, paths } from './api.js';

/** The key goes in the Authorization header of every request; never in a URL. */
export function createPmhClient(baseUrl: string, key: string): Client<paths> {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });
}

interface Page<T> {
  data?: { data: T[]; pagination: { has_more: boolean; next_cursor: string | null } };
  error?: unknown;
  response: Response;
}

/** Every item of a paged route: `fetchPage(cursor)` asks for one page, `walk` follows the cursors. */
export async function* walk<T>(fetchPage: (cursor: string | undefined) => Promise<Page<T>>): AsyncGenerator<T> {
  let cursor: string | undefined;
  do {
    const page = await fetchPage(cursor);
    if (!page.data) throw new Error(`HTTP ${page.response.status}: ${JSON.stringify(page.error)}`);
    yield* page.data.data;
    cursor = page.data.pagination.has_more ? (page.data.pagination.next_cursor ?? undefined) : undefined;
  } while (cursor);
}
