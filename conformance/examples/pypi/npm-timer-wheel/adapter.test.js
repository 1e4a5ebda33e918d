'use strict';
// npm test (after npm ci): a batch is answered as its requests are one at a time, but for those after a failure (up
// to the next init), which are skipped.
const assert = require('assert');
const { spawnSync } = require('child_process');
const path = require('path');
const test = require('node:test');

// Runs the adapter on these request lines; returns its responses.
function serve(lines) {
  const input = `${lines.join('\n')}\n`;
  const done = spawnSync(process.execPath, [path.join(__dirname, 'adapter.js')], { input, encoding: 'utf8' });
  assert.strictEqual(done.status, 0, done.stderr);
  return done.stdout.trim().split('\n').map((line) => JSON.parse(line));
}

const init = '{"cmd":"init","args":{"profile":"timer",' +
  '"params":{"tick_ms":1,"wheel_size":20,"start_ms":0,"purge_interval":1000}}}';
const requests = [
  init,
  '{"cmd":"timer_add","args":{"task":"a","delay_ms":5}}',
  '{"cmd":"advance","args":{"to_ms":5}}',
  '{"cmd":"timer_add","args":{"task":"b","delay_ms":9223372036854775807}}', // an error: an observation, not a failure
  '{"cmd":"timer_add","args":{"task":"c","delay_ms":3}}',
  '{"cmd":"wheel","args":{}}', // a read-out it does not have
  '{"cmd":"advance","args":{"to_ms":8}}',
  '{"cmd":"size","args":{}}',
  init,
  '{"cmd":"timer_add","args":{"task":"a","delay_ms":2}}',
  '{"cmd":"advance","args":{"to_ms":2}}',
  '{"cmd":"shutdown","args":{}}',
];
const skipped = [6, 7];

test('a batch is answered as its requests are one at a time, skipped after a failure up to the next init', () => {
  const alone = serve(requests.map((request, seq) => `{"seq":${seq},${request.slice(1)}`));
  assert.ok('failure' in alone[5], 'the unknown command fails');
  assert.strictEqual(alone[3].error, 'delay_out_of_range');
  const want = alone.map(({ seq, ...answer }, i) => (skipped.includes(i) ? { skipped: true } : answer));

  const [hello, batch] = serve(['{"seq":0,"cmd":"hello","args":{"protocol_version":1}}',
    `{"seq":1,"cmd":"batch","args":{"requests":[${requests.join(',')}]}}`]);
  assert.ok(hello.result.features.includes('batch'));
  assert.deepStrictEqual(batch, { seq: 1, result: want, events: [] });
});
