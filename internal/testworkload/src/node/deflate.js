// deflate.js compresses a buffer, over and over, in compressBlock, called
// from compressOuter: its time goes to zlib's deflate, in node's binary.
'use strict';

const zlib = require('zlib');
const block = Buffer.alloc(1 << 16, 'the quick brown fox jumps over the lazy dog ');

function compressBlock() {
  return zlib.deflateSync(block, { level: 9 });
}

function compressOuter() {
  return compressBlock().length;
}

let sink = 0;
for (;;) {
  sink += compressOuter();
}
