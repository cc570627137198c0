import type { Command } from 'commander';
import { withServices } from '../admin/users.js';
import { printImport } from './import.js';

/** `unihost image import-guest DIR`: imports the project's test images (guest/build-images.sh output). */
export function registerImageImportGuest(image: Command): void {
  image
    .command('import-guest [dir]')
    .description(
      'import the test guest images built by guest/build-images.sh as official images (default dir: guest/out)',
    )
    .action(async (dir: string | undefined) => {
      const { importGuestImages } = await import('../../images/guest.js');
      await withServices(image.opts(), async (s) => {
        for (const r of await importGuestImages(s.images, dir ?? 'guest/out')) printImport(r);
      });
    });
}
