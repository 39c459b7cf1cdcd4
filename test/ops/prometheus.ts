// Reading a /hub/metrics answer (the Prometheus text format) in tests.

export interface Sample { name: string; labels: Record<string, string>; value: number }

/** Every sample line of a Prometheus text answer. */
export function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** Every sample of a metric whose labels include `labels`, summed. */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const s of samples(text)) {
    if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
  }
  return sum;
}

/** The `# TYPE` a family is declared with, or undefined. */
export function typeOf(text: string, family: string): string | undefined {
  return new RegExp(`^# TYPE ${family} (\\w+)$`, 'm').exec(text)?.[1];
}
