// A small HTTP client for API tests: every call says who makes it.
export interface ApiResult { status: number; body: any; headers: Headers }

export function apiClient(baseUrl: string) {
  return async function call(method: string, path: string, opts: { token?: string | null; body?: unknown; headers?: Record<string, string> } = {}): Promise<ApiResult> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `token ${opts.token}`;
    let body: string | undefined;
    if (opts.body !== undefined) {
      body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const r = await fetch(`${baseUrl}/hub/api${path}`, { method, headers, body, signal: AbortSignal.timeout(15_000) });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: keep the text
    }
    return { status: r.status, body: parsed, headers: r.headers };
  };
}

export type ApiCall = ReturnType<typeof apiClient>;

export const randomToken = () => Array.from({ length: 32 }, () => '0123456789abcdef'[Math.floor(Math.random() * 16)]).join('');
