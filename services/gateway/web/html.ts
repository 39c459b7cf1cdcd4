// The hub's pages share one small layout. Everything interpolated is escaped.

export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const STYLE = `body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#222}
header{display:flex;justify-content:space-between;align-items:center;border-bottom:1px solid #ddd;margin-bottom:1rem}
.error{color:#a00}table{border-collapse:collapse}td,th{padding:.3rem .6rem;text-align:left;border-bottom:1px solid #eee}
button{padding:.3rem .8rem}input{padding:.3rem;margin:.2rem 0}`;

export function page(title: string, body: string, user?: string): string {
  const nav = user
    ? `<nav><a href="/hub/home">Home</a> · <a href="/hub/token">Token</a> · ${escapeHtml(user)} · <a href="/hub/logout">Log out</a></nav>`
    : '<nav><a href="/hub/login">Log in</a></nav>';
  return `<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${escapeHtml(title)}</title>` +
    `<style>${STYLE}</style></head><body><header><h1>${escapeHtml(title)}</h1>${nav}</header>${body}</body></html>`;
}

export const hidden = (name: string, value: string) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`;
