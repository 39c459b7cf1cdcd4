// A full garbage collection once a burst of bulk work has passed (a bulk create of 10,000 users a request):
// what it left behind is given back at once instead of when V8's memory reducer gets to it, a minute later
// (after a million-user import the whole hub held 266 bytes a user 5 s after, 135 after 65 s). Needs the
// process to run with --expose-gc (the supervisor gives it to the actors that do bulk work); a no-op without.

/** How long after the last bulk operation the collection runs. */
const QUIET_MS = 2000;

let timer: NodeJS.Timeout | undefined;

/** Notes bulk work just done: one collection follows QUIET_MS after the last such note. */
export function collectAfterBurst(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) return;
  clearTimeout(timer);
  timer = setTimeout(gc, QUIET_MS);
  timer.unref();
}
