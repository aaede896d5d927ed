/** Calls `call` for every listener; a listener's throw is its own and stops nothing. */
export function notifyAll<L>(listeners: Iterable<L>, call: (listener: L) => void): void {
  for (const listener of listeners) {
    try {
      call(listener);
    } catch {
      // A listener's failure is its own.
    }
  }
}
