import { watch, type FSWatcher } from 'node:fs';

/** A watch of some files of a directory (`watchFiles`); `close` ends it and any call still due. */
export interface FilesWatch {
  close(): void;
}

/**
 * Calls `onChange` when one of the files `names` of `dir` changes, with
 * wake-ups bounded while they keep changing: a change is answered at once
 * (in the next turn of the event loop, with the rest of that turn's events),
 * and then the directory's inotify watch is closed for `pauseMs()`; when it
 * is made again, `onChange` is called once more for what changed meanwhile.
 * So a file written a byte at a time wakes the process about twice per
 * pause, not once per write, and its last write is seen at most one pause
 * late. `pauseMs()` is asked at each change: 0 keeps the watch open (one
 * call per turn of the event loop that saw changes).
 *
 * Why: QEMU writes a guest's console one write(2) per byte (its UART), a
 * Unikraft boot ~600 of them; woken at each, the daemon took the booting
 * guest's core from it whenever the host was busy (docs/machines.md,
 * "Console log"). Where the watch cannot be made (the directory is
 * gone), nothing is called: the caller's poll backs it up, as it does for
 * file systems whose inotify misses events.
 */
export function watchFiles(dir: string, names: Set<string>, pauseMs: () => number, onChange: () => void): FilesWatch {
  let watcher: FSWatcher | null = null;
  let resume: NodeJS.Timeout | null = null;
  let immediate: NodeJS.Immediate | null = null;
  let closed = false;
  const arm = (): void => {
    try {
      watcher = watch(dir, (_type, name) => {
        if (closed || resume || immediate || (name !== null && !names.has(String(name)))) return;
        immediate = setImmediate(() => {
          immediate = null;
          onChange();
        });
        const pause = pauseMs();
        if (pause <= 0) return;
        watcher?.close();
        watcher = null;
        resume = setTimeout(() => {
          resume = null;
          if (closed) return;
          arm();
          onChange(); // what changed while the watch was closed
        }, pause);
      });
      // an error after the watch was made (its directory removed): the caller's poll goes on
      watcher.on('error', () => {
        watcher?.close();
        watcher = null;
      });
    } catch {
      watcher = null;
    }
  };
  arm();
  return {
    close() {
      closed = true;
      watcher?.close();
      watcher = null;
      if (resume) clearTimeout(resume);
      if (immediate) clearImmediate(immediate);
    },
  };
}
