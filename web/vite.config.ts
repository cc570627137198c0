// Builds the web console into web/dist, which the daemon serves at `/` (src/api/console.ts).
import { defineConfig } from 'vite';
import preact from '@preact/preset-vite';

export default defineConfig({
  root: import.meta.dirname,
  plugins: [preact()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // the daemon sends a strict Content-Security-Policy: no inline script or style in the page
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    target: 'es2022',
    reportCompressedSize: false,
  },
  server: {
    // `npm run dev:web`: the API of a daemon on this machine behind Vite's dev server
    proxy: { '/v1': process.env.UNIHOST_URL ?? 'http://127.0.0.1:7878' },
  },
});
