import type { Command } from 'commander';
import { registerImageImport } from './import.js';
import { registerImageImportGuest } from './import-guest.js';
import { registerImageList } from './list.js';

/** `unihost image ...`: manage the image store (works on the data dir directly, like `admin`). */
export function registerImage(program: Command): void {
  const image = program
    .command('image')
    .description('import and list images (works on the data dir directly)')
    .option('--data-dir <dir>', 'data directory (env UNIHOST_DATA_DIR)')
    .option('--config <file>', 'JSON config file (env UNIHOST_CONFIG)');
  registerImageImport(image);
  registerImageImportGuest(image);
  registerImageList(image);
}
