// crunch.js spends its time in crunchLeaf, called through a known chain,
// crunchOuter -> crunchMiddle -> crunchLeaf, small enough for TurboFan to
// inline all three into the hot loop at the bottom.
'use strict';

function crunchLeaf(x) {
  for (let i = 0; i < 64; i++) {
    x = (Math.imul(x, 1103515245) + 12345) | 0;
  }
  return x;
}

function crunchMiddle(x) {
  return crunchLeaf(x ^ 0x5bd1e995);
}

function crunchOuter(x) {
  return crunchMiddle(x + 1);
}

let sink = 0;
for (;;) {
  sink = crunchOuter(sink);
}
