import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseStat } from './runtime.js';

// the head of a real `show stat` answer (HAProxy 2.6), cut to a few columns, with the column order kept
const CSV = [
  '# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,status,req_tot,',
  'p80,FRONTEND,,,3,5,2000,40,1200,3400,0,OPEN,38,',
  'g80_http0,BACKEND,0,0,2,4,200,17,900,2100,0,UP,,',
  'g80_http0,i0,0,0,2,3,,17,900,2100,,UP,15,',
  '',
].join('\n');

test('show stat: the rows by name, only the columns the counters read unless told others', () => {
  const rows = parseStat(CSV);
  assert.equal(rows.length, 3);
  assert.deepEqual(rows[2], {
    pxname: 'g80_http0',
    svname: 'i0',
    scur: '2',
    req_tot: '15',
    stot: '17',
    bin: '900',
    bout: '2100',
  });
  assert.equal(rows[1]!.req_tot, '', 'an empty field stays empty (a TCP backend has no request count)');
  assert.deepEqual(parseStat(CSV, ['svname', 'status', 'qcur']), [
    { svname: 'FRONTEND', status: 'OPEN', qcur: '' },
    { svname: 'BACKEND', status: 'UP', qcur: '0' },
    { svname: 'i0', status: 'UP', qcur: '0' },
  ]);
  assert.deepEqual(parseStat(CSV, ['pxname', 'no_such']), [
    { pxname: 'p80' },
    { pxname: 'g80_http0' },
    { pxname: 'g80_http0' },
  ]);
  assert.deepEqual(parseStat('Unknown command\n'), [], 'an answer that is not the CSV');
});

test('show stat: the answer to several commands, a header per section; a refusal between them is left out', () => {
  const csv = [
    '# pxname,svname,scur,stot',
    'p80,FRONTEND,1,9',
    '',
    'No such proxy.',
    '',
    '# pxname,svname,stot,scur',
    'g80_http0,i0,7,2',
    'g80_http0,BACKEND,8,3',
    '',
  ].join('\n');
  assert.deepEqual(parseStat(csv, ['pxname', 'svname', 'scur', 'stot']), [
    { pxname: 'p80', svname: 'FRONTEND', scur: '1', stot: '9' },
    { pxname: 'g80_http0', svname: 'i0', scur: '2', stot: '7' },
    { pxname: 'g80_http0', svname: 'BACKEND', scur: '3', stot: '8' },
  ]);
});
