import type { BlobShare } from '../images/share.js';
import type { Store } from './types.js';

/** The store's `blobs` as a share of image content (src/images/share.ts): each chunk in a transaction of its own. */
export function storeBlobs(store: Store): BlobShare {
  return {
    stat: (d) => store.read((tx) => tx.blobs.stat(d)),
    putChunk: (d, seq, data) => store.tx((tx) => tx.blobs.putChunk(d, seq, data)),
    finish: (d, size, chunks) => store.tx((tx) => tx.blobs.finish(d, size, chunks)),
    chunk: (d, seq) => store.read((tx) => tx.blobs.chunk(d, seq)),
  };
}
