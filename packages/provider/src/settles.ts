/**
 * `true` when `promise` settles within `ms`, `false` once `ms` have passed first. Never rejects
 * (a rejected `promise` counts as settled only through the caller's own `.catch`); the timer never
 * keeps the process alive.
 */
export async function settlesWithin(promise: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}
