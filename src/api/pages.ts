// Pages served by the API process, no CDN: the API reference (Swagger UI from `swagger-ui-dist`
// over /v3/openapi.json) and the market explorer (web/explorer, uPlot from `uplot`). Keys pasted
// into either travel as a Bearer header, never in a URL, and are not kept after the tab closes.
// Every file is read once at start.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type Koa from 'koa';

const require = createRequire(import.meta.url);

export const DOCS_PATH = '/v3/docs';
export const EXPLORER_PATH = '/v3/explorer';

const HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Prediction-market history: API reference</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="${DOCS_PATH}/assets/favicon-32x32.png">
<link rel="stylesheet" href="${DOCS_PATH}/assets/swagger-ui.css">
</head>
<body>
<div id="reference"></div>
<script src="${DOCS_PATH}/assets/swagger-ui-bundle.js"></script>
<script src="${DOCS_PATH}/init.js"></script>
</body>
</html>
`;

const INIT = `window.ui = SwaggerUIBundle({
  url: '/v3/openapi.json',
  dom_id: '#reference',
  deepLinking: true,
  tryItOutEnabled: true,
  persistAuthorization: false,
  displayRequestDuration: true,
});
`;

// Scripts and styles from this origin only; Swagger UI and uPlot set inline styles, and the
// explorer saves downloads through blob: URLs.
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'";

interface Page {
  type: string;
  body: Buffer;
  csp?: boolean;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.png': 'image/png',
};

function file(dir: string, name: string, csp = false): Page {
  return { type: TYPES[path.extname(name)], body: fs.readFileSync(path.join(dir, name)), csp };
}

function assets(): Map<string, Page> {
  const web = fileURLToPath(new URL('../../web/explorer/', import.meta.url));
  const uplot = path.join(path.dirname(require.resolve('uplot/package.json')), 'dist');
  const explorer: [string, Page][] = [
    [EXPLORER_PATH, file(web, 'index.html', true)],
    [`${EXPLORER_PATH}/app.js`, file(web, 'app.js')],
    [`${EXPLORER_PATH}/app.css`, file(web, 'app.css')],
    [`${EXPLORER_PATH}/assets/uPlot.iife.min.js`, file(uplot, 'uPlot.iife.min.js')],
    [`${EXPLORER_PATH}/assets/uPlot.min.css`, file(uplot, 'uPlot.min.css')],
  ];
  const dir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
  const files: Record<string, string> = {
    'swagger-ui.css': 'text/css; charset=utf-8',
    'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
    'favicon-32x32.png': 'image/png',
  };
  const pages = new Map<string, Page>([
    [DOCS_PATH, { type: 'text/html; charset=utf-8', body: Buffer.from(HTML), csp: true }],
    [`${DOCS_PATH}/init.js`, { type: 'text/javascript; charset=utf-8', body: Buffer.from(INIT) }],
  ]);
  for (const [name, type] of Object.entries(files))
    pages.set(`${DOCS_PATH}/assets/${name}`, { type, body: fs.readFileSync(path.join(dir, name)) });
  for (const [at, page] of explorer) pages.set(at, page);
  return pages;
}

/** Serves the pages and their assets; everything else passes on. */
export function pages(): Koa.Middleware {
  const served = assets();
  return async (ctx, next) => {
    const page = ctx.method === 'GET' || ctx.method === 'HEAD' ? served.get(ctx.path) : undefined;
    if (!page) return next();
    ctx.state.routeId = ctx.path.startsWith(EXPLORER_PATH) ? 'explorer' : 'docs';
    ctx.type = page.type;
    ctx.set('Cache-Control', page.csp ? 'no-cache' : 'public, max-age=3600');
    ctx.set('X-Content-Type-Options', 'nosniff');
    if (page.csp) ctx.set('Content-Security-Policy', CSP);
    ctx.body = page.body;
  };
}
