import type { Command } from 'commander';
import { registerImageImport } from './import.js';
import { registerImageImportGuest } from './import-guest.js';
import { registerImageList } from './list.js';
import { registerImageGc } from './gc.js';
import { registerImagePull } from './pull.js';
import { registerImageDelete, registerImagePush } from './push.js';
import { addClientOptions } from '../shared/context.js';

/**
 * `unihost image ...`: `import` works on the data dir directly (like `admin`);
 * `list` asks the API unless a data dir is given.
 */
export function registerImage(program: Command): void {
  const image = addClientOptions(
    program
      .command('image')
      .description("push images to the platform's registry, list and delete them; import them on the data dir directly")
      .option('--data-dir <dir>', 'data directory (env UNIHOST_DATA_DIR)')
      .option(
        '--store <url>',
        'the store: postgresql://USER@HOST/DB (env UNIHOST_STORE; default SQLite in the data dir)',
      )
      .option('--config <file>', 'JSON config file (env UNIHOST_CONFIG)'),
  );
  registerImageImport(image);
  registerImageImportGuest(image);
  registerImageList(image);
  registerImagePush(image);
  registerImageDelete(image);
  registerImageGc(image);
  registerImagePull(image);
}
