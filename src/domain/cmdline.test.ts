import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildCmdline, envValueProblem, quoteWord, wordProblem } from './cmdline.js';

/**
 * The guest's word splitter as docs/guest-contract.md §1 specifies it
 * (Unikraft's `uk_argnparse`): whitespace separates words outside quotes,
 * `"` and `'` quote anywhere inside a word and are removed, no escapes.
 */
function split(line: string): string[] {
  const words: string[] = [];
  let cur = '';
  let inWord = false;
  let quote: string | null = null;
  for (const ch of line) {
    if (quote) {
      if (ch === quote) quote = null;
      else cur += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord && cur !== '') words.push(cur);
      cur = '';
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  assert.equal(quote, null, `unterminated quote in ${line}`);
  if (inWord && cur !== '') words.push(cur);
  return words;
}

const TRICKY = [
  'plain',
  'two words',
  `it's`,
  'say "hi"',
  `a"b'c`,
  `'"`,
  `"'"'`,
  `both ' and " in one`,
  `ends with '`,
  `"starts`,
  '\ttab',
  '--',
];

test('every argument survives the guest splitter, quote characters included', () => {
  for (const w of TRICKY) assert.deepEqual(split(quoteWord(w)), [w], `word ${JSON.stringify(w)} -> ${quoteWord(w)}`);
  const line = buildCmdline({ kernelArgs: '', env: {}, mounts: [], args: TRICKY });
  const words = split(line);
  assert.deepEqual(words.slice(words.indexOf('--') + 1), TRICKY);
});

test('the quoting of a word with both quote characters follows the contract example', () => {
  assert.equal(quoteWord(`a"b'c`), `'a"b'"'c"`);
});

test('env values: one quote character is fine, both are refused; newlines and NUL are refused everywhere', () => {
  assert.equal(envValueProblem(`it's`), null);
  assert.equal(envValueProblem('say "hi"'), null);
  assert.match(envValueProblem(`a"b'c`)!, /both/);
  assert.match(envValueProblem('a\nb')!, /newlines/);
  assert.match(wordProblem('a\0b')!, /NUL/);
  assert.equal(wordProblem(`a"b'c`), null);
  const line = buildCmdline({ kernelArgs: '', env: { A: `it's`, B: 'say "hi"' }, mounts: [], args: [] });
  const words = split(line);
  assert.deepEqual(words.slice(words.indexOf('env.vars=[') + 1, words.indexOf(']')), [`A=it's`, 'B=say "hi"']);
});
