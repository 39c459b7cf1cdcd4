// The hub's pages share one layout: one stylesheet and the page scripts served by the hub itself
// (static/, read once at start), a top bar (Home, Token, Admin for those who may, Services, the theme,
// Logout), and the security headers every page carries. Everything interpolated is escaped. Every page
// loads static/hub.js first (the theme before first paint, password Show buttons, confirmations).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HubConfig } from '../../../shared/config.js';
import { REPO_ROOT } from '../../../shared/paths.js';
import { hubUrl } from '../../../shared/urls.js';

export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export interface StaticAsset { body: Buffer; type: string; etag: string }

const TYPES: Record<string, string> = { '.css': 'text/css; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.png': 'image/png', '.svg': 'image/svg+xml' };

/** The files under services/gateway/web/static/ (sources, not compiled: the same for tsx and dist/), kept in memory. */
export const STATIC_ASSETS: ReadonlyMap<string, StaticAsset> = (() => {
  const dir = join(REPO_ROOT, 'services', 'gateway', 'web', 'static');
  const out = new Map<string, StaticAsset>();
  for (const file of readdirSync(dir)) {
    const type = TYPES[file.slice(file.lastIndexOf('.'))];
    if (!type) continue;
    const body = readFileSync(join(dir, file));
    out.set(file, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"` });
  }
  return out;
})();

/** An asset's URL, versioned by its content so a browser never runs a stale script with a new page. */
export function assetUrl(file: string): string {
  const a = STATIC_ASSETS.get(file);
  if (!a) throw new Error(`no static asset ${file}`);
  return `${hubUrl('/hub/static/')}${file}?v=${a.etag.slice(1, 9)}`;
}

/** Content-Security-Policy of the hub's pages: only the hub's own scripts and styles, framed only by the hub. */
export const DEFAULT_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; frame-ancestors 'self'";

/** The API answers JSON, never a document: nothing may load from it, and only the hub may frame it (as the established hub). */
export const API_CSP = "default-src 'none'; frame-ancestors 'self'";

/**
 * Headers on every answer the gateway gives itself (pages, errors, API); `Hub.extra_headers` adds or replaces.
 * API answers (`api`) carry the short policy: ~200 bytes less on every call.
 */
export function securityHeaders(config: HubConfig, { api = false } = {}): Record<string, string> {
  return {
    'Content-Security-Policy': api ? API_CSP : DEFAULT_CSP,
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'same-origin',
    ...config.Hub.extra_headers,
  };
}

/** Who is looking at a page: what the top bar offers them. */
export interface Nav {
  user: string;
  /** may open the admin page (`admin-ui`) */
  admin?: boolean;
  /** the Services menu: services with a url and display true that this visitor may use (access:services) */
  services?: { name: string; href: string }[];
}

export interface PageOptions {
  /** page scripts from static/ (file names) */
  scripts?: string[];
  /** data for the page's scripts, as JSON in a data attribute of <main> (never inline script) */
  data?: unknown;
}

/**
 * The theme choice (system / light / dark): hidden until static/hub.js wires it (without script it could do
 * nothing; the page then follows the system). The stylesheet reads the choice from <html data-theme>.
 */
const THEME_PICKER = '<label class="theme" hidden>Theme <select id="theme-choice">' +
  '<option value="system">System</option><option value="light">Light</option><option value="dark">Dark</option></select></label>';

function topbar(nav?: Nav | string): string {
  if (!nav) return `<header class="topbar"><a class="brand" href="${hubUrl('/hub/home')}">Hub</a><nav></nav>${THEME_PICKER}<a href="${hubUrl('/hub/login')}">Sign in</a></header>`;
  const n: Nav = typeof nav === 'string' ? { user: nav } : nav;
  const services = n.services?.length
    ? `<details class="menu" id="services-menu"><summary>Services</summary><ul>${n.services.map((s) => `<li><a href="${escapeHtml(s.href)}">${escapeHtml(s.name)}</a></li>`).join('')}</ul></details>`
    : '';
  return `<header class="topbar"><a class="brand" href="${hubUrl('/hub/home')}">Hub</a><nav>` +
    `<a href="${hubUrl('/hub/home')}">Home</a><a href="${hubUrl('/hub/token')}">Token</a>` +
    (n.admin ? `<a href="${hubUrl('/hub/admin')}">Admin</a>` : '') + services +
    `</nav>${THEME_PICKER}<span class="who">${escapeHtml(n.user)}</span><a href="${hubUrl('/hub/logout')}" id="logout">Logout</a></header>`;
}

export function page(title: string, body: string, nav?: Nav | string, options: PageOptions = {}): string {
  const scripts = (options.scripts ?? []).map((s) => `<script src="${escapeHtml(assetUrl(s))}" defer></script>`).join('');
  const data = options.data === undefined ? '' : ` data-page="${escapeHtml(JSON.stringify(options.data))}"`;
  // hub.js without defer, before the stylesheet: it sets the theme before anything is painted
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<meta name="color-scheme" content="light dark"><script src="${escapeHtml(assetUrl('hub.js'))}"></script>` +
    `<title>${escapeHtml(title)}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="${escapeHtml(assetUrl('hub.css'))}">${scripts}</head>` +
    `<body>${topbar(nav)}<main${data}><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`;
}

export const hidden = (name: string, value: string) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`;

/** "3 minutes ago" for an ISO time ('never' when empty): pages show when, not the raw timestamp. */
export function ago(iso: string | null | undefined, now = Date.now()): string {
  const t = iso ? Date.parse(iso) : NaN;
  if (!Number.isFinite(t)) return 'never';
  const s = Math.round((now - t) / 1000);
  if (s < 0) return `in ${until(-s)}`;
  if (s < 45) return 'just now';
  return `${until(s)} ago`;
}

function until(s: number): string {
  const [n, unit] = s < 90 ? [1, 'minute'] : s < 3600 ? [Math.round(s / 60), 'minute'] : s < 86_400 ? [Math.round(s / 3600), 'hour'] : [Math.round(s / 86_400), 'day'];
  return `${n} ${unit}${n === 1 ? '' : 's'}`;
}
