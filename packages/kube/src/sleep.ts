/**
 * Waits `ms` milliseconds, or less: resolves as soon as `signal` aborts (at once when it already
 * has). Never rejects, so a loop can `await abortableSleep(ms, signal)` and then check
 * `signal.aborted`. The timer is cleared on abort, so nothing keeps the process alive.
 */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
